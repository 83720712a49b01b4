package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jobonce/jobonce/core/driver"
)

var forgetCommand = &command{
	name:    "forget",
	args:    []string{"KEY"},
	keyed:   true,
	summary: "delete a done marker, so the job runs again",
	about: `forget deletes a key's done marker, so that the next copy of its job runs again. It shows the
marker, then asks "delete? [y/N]" and reads the answer from stdin (anything but y or yes, end of
input included, deletes nothing); -yes deletes without asking. It refuses a running claim (release
ends those), and deletes the marker only if the key still holds the one it showed, in one step: a
claim or marker written since is kept. On PostgreSQL the row expires at once and stays until pruned.`,
	flags: func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.yes, "yes", false, "delete without asking")
	},
	run: runForget,
}

func runForget(ctx context.Context, c *invocation) error {
	t, err := readKey(ctx, c)
	if err != nil {
		return err
	}
	defer t.store.close()
	switch t.rec.State {
	case 0:
		t.explainAbsent(ctx, c.out)
		return errors.New("forget: nothing is stored under the key; nothing deleted")
	case driver.StateRunning:
		return errors.New("forget: the key holds a running claim, not a done marker (release ends a claim); nothing deleted")
	}
	fmt.Fprintln(c.out, "forget deletes this done marker: the next copy of the job delivered runs again.")
	if !c.opt.yes {
		answer, err := ask(c.in, c.out, "delete? [y/N] ")
		if err != nil {
			return fmt.Errorf("forget: reading the answer: %w; nothing deleted", err)
		}
		if answer != "y" && answer != "yes" {
			return fmt.Errorf("forget: not confirmed (answered %q; -yes deletes without asking); nothing deleted", answer)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	deleted, err := t.store.forget(ctx, t.lookup.stored, t.rec)
	if err != nil {
		return err
	}
	if !deleted {
		now, err := t.store.inspect(ctx, t.lookup.stored)
		what := "it is gone"
		switch {
		case err != nil:
			what = "reading it again failed: " + err.Error()
		case now.State != 0:
			what = "it now holds a " + stateName(now.State)
		}
		return fmt.Errorf("forget: the key changed since it was shown (%s); nothing deleted", what)
	}
	fmt.Fprintln(c.out, "deleted: the next copy of the job runs")
	return nil
}

// ask prints question to out and returns the line read from in, trimmed
// and lower-cased; "" at the end of input. An answer read from a pipe or a
// file, which no terminal echoes, is followed by a newline of its own.
func ask(in io.Reader, out io.Writer, question string) (string, error) {
	fmt.Fprint(out, question)
	if in == nil {
		fmt.Fprintln(out)
		return "", nil
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if !isTerminal(in) {
		fmt.Fprintln(out)
	}
	return strings.ToLower(strings.TrimSpace(line)), nil
}

// isTerminal reports whether r is a terminal: a character device other
// than os.DevNull, which a CI job's stdin or < /dev/null is.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	if err != nil || info.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(info, null)
}
