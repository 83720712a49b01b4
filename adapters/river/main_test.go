package riveronce_test

import (
	"os"
	"testing"

	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunExamples(m, pgtest.NeedPostgres)) }
