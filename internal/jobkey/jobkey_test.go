package jobkey_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
)

func TestDefaultKeyHoldsThePayloadHash(t *testing.T) {
	a := jobkey.Job("src", "email", []byte(`{"to":1}`), "", false, nil)
	b := jobkey.Job("src", "email", []byte(`{"to":2}`), "", false, nil)
	require.Equal(t, "email:"+core.Fingerprint([]byte(`{"to":1}`)), a.Key)
	require.NotEqual(t, a.Key, b.Key)
	require.Empty(t, a.Fingerprint, "the default key holds the fingerprint already")
	require.True(t, a.DefaultKey, "the default key is marked as such")
	require.Equal(t, a, jobkey.Job("src", "email", []byte(`{"to":1}`), "", false, nil))
	require.Equal(t, "email", a.Kind)
	require.Equal(t, "src", a.Source)
}

func TestNamedKeyStoresThePayloadFingerprint(t *testing.T) {
	j := jobkey.Job("src", "email", []byte("body"), "user-42", true, nil)
	require.Equal(t, core.Job{Key: "user-42", Fingerprint: core.Fingerprint([]byte("body")), Kind: "email", Source: "src"}, j)
	require.False(t, j.DefaultKey)
}

func TestNamedEmptyKeyIsKeptForTheGuardToReject(t *testing.T) {
	require.Empty(t, jobkey.Job("src", "email", []byte("body"), "", true, nil).Key)
}

func TestCustomFingerprintWins(t *testing.T) {
	fp := func() string { return "v1" }
	require.Equal(t, "v1", jobkey.Job("src", "k", nil, "key", true, fp).Fingerprint)
	d := jobkey.Job("src", "k", nil, "", false, fp)
	require.Equal(t, "v1", d.Fingerprint)
	require.Equal(t, "k:"+core.Fingerprint(nil), d.Key)
	require.Empty(t, jobkey.Job("src", "k", nil, "key", true, func() string { return "" }).Fingerprint, "an empty fingerprint turns the check off")
}

func TestOccurrenceKeyIsNeitherDefaultNorFingerprinted(t *testing.T) {
	j := jobkey.Occurrence("src", "report", "report:periodic:2024-05-01T00:00:00Z", nil)
	require.Equal(t, core.Job{Key: "report:periodic:2024-05-01T00:00:00Z", Kind: "report", Source: "src"}, j)
	require.Equal(t, "v1", jobkey.Occurrence("src", "report", "k", func() string { return "v1" }).Fingerprint)
}
