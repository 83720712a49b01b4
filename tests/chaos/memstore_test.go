package chaos_test

import (
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/tests/chaos"
)

func TestMemstore(t *testing.T) {
	chaos.Run(t, chaos.Options{Store: memstore.New(), Duration: time.Second})
}
