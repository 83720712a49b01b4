package asynqonce

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"
)

// typeSet is a set of task types.
type typeSet map[string]struct{}

func newTypeSet(types []string) typeSet {
	if len(types) == 0 {
		return nil
	}
	s := make(typeSet, len(types))
	for _, typ := range types {
		s[typ] = struct{}{}
	}
	return s
}

func (s typeSet) has(typ string) bool {
	_, ok := s[typ]
	return ok
}

// checkPeriodicTypes returns an error naming a type listed in both
// Config.PeriodicTypes and Config.UnguardedTypes.
func checkPeriodicTypes(periodic []string, unguarded typeSet) error {
	for _, typ := range periodic {
		if unguarded.has(typ) {
			return fmt.Errorf("jobonce: asynqonce: Config.PeriodicTypes and Config.UnguardedTypes both list task type %q; keep it in one", typ)
		}
	}
	return nil
}

// occurrenceKey returns the key of a task of a Config.PeriodicTypes type:
// its type, ":task:", its queue, ":" and its task ID, which name the one
// enqueue the task came from. It returns "" when ctx carries no task ID (a
// handler called outside an asynq.Server), which the Guard rejects.
func occurrenceKey(ctx context.Context, t *asynq.Task) string {
	id, ok := asynq.GetTaskID(ctx)
	if !ok || id == "" {
		return ""
	}
	queue, _ := asynq.GetQueueName(ctx)
	return t.Type() + ":task:" + queue + ":" + id
}

// errNoTaskID explains the rejection of a periodic type's task without a
// task ID.
func errNoTaskID(t *asynq.Task, err error) error {
	return fmt.Errorf("jobonce: asynqonce: task type %q is in Config.PeriodicTypes, keyed by its task ID, but its context carries none (asynq.GetTaskID): run it through an asynq.Server: %w (%w)", t.Type(), err, asynq.SkipRetry)
}
