package sqsonce

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each message id counts its own receives; a deleted message is forgotten;
// past receivesLimit messages, the count that would be forgotten first gives
// way, so the map never grows beyond the limit.
func TestReceivesCountsPerMessageWithinItsLimit(t *testing.T) {
	t.Parallel()
	var r receives
	require.Equal(t, 1, r.add("a"))
	require.Equal(t, 2, r.add("a"))
	require.Equal(t, 1, r.add("b"))
	require.Equal(t, 3, r.add("a"))
	r.forget("a")
	require.Equal(t, 1, r.add("a"))

	for i := range receivesLimit + 10 {
		r.add(strconv.Itoa(i))
	}
	require.Len(t, r.n, receivesLimit)
	require.Equal(t, 2, r.add(strconv.Itoa(receivesLimit+9)), "the newest count was dropped")
}
