package nilcheck_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/nilcheck"
)

type valueWriter struct{}

func (valueWriter) Write(p []byte) (int, error) { return len(p), nil }

type funcWriter func([]byte) (int, error)

func (f funcWriter) Write(p []byte) (int, error) { return f(p) }

func TestIsNilSeesTypedNils(t *testing.T) {
	t.Parallel()
	var untyped io.Writer
	require.True(t, nilcheck.IsNil(untyped))
	require.True(t, nilcheck.IsNil(io.Writer((*bytes.Buffer)(nil))), "a nil pointer in an interface")
	require.True(t, nilcheck.IsNil(io.Writer(funcWriter(nil))), "a nil func in an interface")
	require.False(t, nilcheck.IsNil(io.Writer(&bytes.Buffer{})))
	require.False(t, nilcheck.IsNil(io.Writer(valueWriter{})), "a struct value is never nil")
	require.False(t, nilcheck.IsNil(0))
}
