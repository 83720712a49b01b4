package watermillonce

import (
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

func TestProducedRoundTrip(t *testing.T) {
	t.Parallel()
	a := message.NewMessage("uuid-a", message.Payload("receipt"))
	a.Metadata.Set("correlation_id", "c-1")
	a.Metadata.Set("", "empty key")
	b := message.NewMessage("", nil)
	c := message.NewMessage("uuid-c", message.Payload([]byte{0, 0xff, '\n'}))
	c.Metadata.Set("k", "")

	require.Nil(t, encodeProduced(nil), "nothing produced: nothing stored")
	require.Nil(t, encodeProduced([]*message.Message{nil}))

	got, err := decodeProduced(encodeProduced([]*message.Message{a, nil, b, c}))
	require.NoError(t, err)
	require.Len(t, got, 3, "nil entries are left out")
	for i, want := range []*message.Message{a, b, c} {
		require.True(t, want.Equals(got[i]), "message %d: %+v, want %+v", i, got[i], want)
	}
	require.Equal(t, encodeProduced([]*message.Message{a}), encodeProduced([]*message.Message{a}), "metadata in key order")

	none, err := decodeProduced(nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestProducedRejectsWhatItDidNotWrite(t *testing.T) {
	t.Parallel()
	good := encodeProduced([]*message.Message{message.NewMessage("u", message.Payload("p"))})
	for name, b := range map[string][]byte{
		"another version": append([]byte{producedUnstored + 1}, good[1:]...),
		"truncated":       good[:len(good)-1],
		"trailing bytes":  append(append([]byte(nil), good...), 0),
		"huge count":      {producedVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge length":     {producedVersion, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad varint":      {producedVersion, 0xff},
	} {
		_, err := decodeProduced(b)
		require.ErrorIs(t, err, errProducedEncoding, name)
	}
}

func TestProducedOverTheLimitIsStoredAsNotStored(t *testing.T) {
	t.Parallel()
	msgs := []*message.Message{message.NewMessage("u", message.Payload("payload"))}
	encoded := encodeProduced(msgs)

	b, stored := storedProduced(msgs, encoded, len(encoded))
	require.True(t, stored)
	require.Equal(t, encoded, b)

	b, stored = storedProduced(msgs, encoded, len(encoded)-1)
	require.False(t, stored)
	_, err := decodeProduced(b)
	require.ErrorIs(t, err, ErrProducedNotStored)
	require.ErrorContains(t, err, fmt.Sprintf("1 messages, %d bytes encoded", len(encoded)))

	b, stored = storedProduced(msgs, encoded, 1)
	require.False(t, stored)
	require.Len(t, b, 1, "within any limit")
	_, err = decodeProduced(b)
	require.ErrorIs(t, err, ErrProducedNotStored)
}
