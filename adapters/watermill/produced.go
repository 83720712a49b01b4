package watermillonce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
)

// The messages a handler produced are stored with its done marker, so that
// a duplicate returns them again: their UUIDs, metadata and payloads, in
// order. The encoding is producedVersion, then the number of messages, then
// for each its UUID, its metadata (a count, then key and value pairs in key
// order) and its payload, every string and count as a uvarint length or
// value. Messages too large to store are replaced by producedUnstored, then
// their number and encoded size as uvarints when those fit the limit too.
const (
	producedVersion  = 1
	producedUnstored = 2
)

var errProducedEncoding = errors.New("jobonce: watermillonce: stored produced messages are not in a known encoding")

// encodeProduced returns the stored form of msgs, or nil when there are none
// (nothing is stored then). Nil entries are left out.
func encodeProduced(msgs []*message.Message) []byte {
	n := 0
	for _, m := range msgs {
		if m != nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	b := []byte{producedVersion}
	b = binary.AppendUvarint(b, uint64(n))
	for _, m := range msgs {
		if m == nil {
			continue
		}
		b = appendString(b, m.UUID)
		keys := make([]string, 0, len(m.Metadata))
		for k := range m.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
			b = appendString(b, m.Metadata[k])
		}
		b = appendString(b, string(m.Payload))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// storedProduced returns what is stored of msgs, whose encoding is
// encoded, under a limit of max bytes: encoded, or when it is over max, the
// record that says they were not stored, with their number and size when
// that fits. stored reports which.
func storedProduced(msgs []*message.Message, encoded []byte, max int) (result []byte, stored bool) {
	if len(encoded) <= max {
		return encoded, true
	}
	b := []byte{producedUnstored}
	b = binary.AppendUvarint(b, uint64(len(msgs)))
	b = binary.AppendUvarint(b, uint64(len(encoded)))
	if len(b) > max {
		b = b[:1]
	}
	return b, false
}

// decodeProduced returns the messages encodeProduced stored in b: new
// messages, with no context and not acknowledged. An empty b holds none.
// The record storedProduced writes for messages not stored gives an error
// matching ErrProducedNotStored.
func decodeProduced(b []byte) ([]*message.Message, error) {
	if len(b) == 0 {
		return nil, nil
	}
	switch b[0] {
	case producedVersion:
	case producedUnstored:
		d := decoder{b: b[1:]}
		if n, size := d.count(), d.count(); !d.bad {
			return nil, fmt.Errorf("%w: the run produced %d messages, %d bytes encoded, over core.Config.MaxResultSize", ErrProducedNotStored, n, size)
		}
		return nil, fmt.Errorf("%w: they were over core.Config.MaxResultSize", ErrProducedNotStored)
	default:
		return nil, fmt.Errorf("%w: %w", ErrProducedNotStored, errProducedEncoding)
	}
	d := decoder{b: b[1:]}
	n := d.count()
	msgs := make([]*message.Message, 0, min(n, uint64(len(d.b))))
	for i := uint64(0); i < n && !d.bad; i++ {
		uuid := d.string()
		fields := d.count()
		md := make(message.Metadata, min(fields, uint64(len(d.b))))
		for j := uint64(0); j < fields && !d.bad; j++ {
			k := d.string()
			md[k] = d.string()
		}
		payload := d.string()
		m := message.NewMessage(uuid, message.Payload(payload))
		m.Metadata = md
		msgs = append(msgs, m)
	}
	if d.bad || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %w", ErrProducedNotStored, errProducedEncoding)
	}
	return msgs, nil
}

// decoder reads what encodeProduced wrote; bad turns true, for good, at the
// first malformed or missing field.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) count() uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	l := d.count()
	if d.bad || l > uint64(len(d.b)) {
		d.bad = true
		return ""
	}
	s := string(d.b[:l])
	d.b = d.b[l:]
	return s
}
