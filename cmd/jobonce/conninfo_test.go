package main

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// conninfoSettings reads each password as pgx reads it: quoted or not,
// with backslash escapes, with space around "=".
func TestConninfoSettingsReadThePasswordAsPgxDoes(t *testing.T) {
	for _, tc := range []struct{ conninfo, raw string }{
		{`host=h password=pw user=u`, `pw`},
		{`host=h password=S3C\ RETpw user=u`, `S3C\ RETpw`},
		{`host=h password='S3C\'RET pw' user=u`, `S3C\'RET pw`},
		{`host=h password = 'p w' user=u`, `p w`},
		{`host=h password='a\\b' user=u`, `a\\b`},
		{`host=h password=a\\b\'c user=u`, `a\\b\'c`},
		{"host=h\tpassword=\t'tab\tbed'\nuser=u", "tab\tbed"},
		{`host=h user=u password=last\`, `last\`},
		{`host=h password='' user=u`, ``},
	} {
		cfg, err := pgconn.ParseConfig(tc.conninfo)
		require.NoError(t, err, tc.conninfo)
		var got []setting
		for _, st := range conninfoSettings(tc.conninfo) {
			if st.keyword == "password" {
				got = append(got, st)
			}
		}
		require.Len(t, got, 1, tc.conninfo)
		require.Equal(t, cfg.Password, got[0].value, "the value pgx reads: %s", tc.conninfo)
		require.Equal(t, tc.raw, got[0].raw, tc.conninfo)
	}
}

// Every password setting's value goes whole, quotes and escapes included;
// the other settings stay as written.
func TestRedactConninfoTakesOutTheWholeValue(t *testing.T) {
	for conninfo, want := range map[string]string{
		`host=h password=S3C\ RETpw sslmode=bogus`:      `host=h password=xxxxx sslmode=bogus`,
		`host=h password='S3C\'RET pw' sslmode=bogus`:   `host=h password=xxxxx sslmode=bogus`,
		`host=h password = 'p w' user=u`:                `host=h password = xxxxx user=u`,
		`host=h password='left open user=u`:             `host=h password=xxxxx`,
		`sslpassword=key password=pw host='a b'`:        `sslpassword=xxxxx password=xxxxx host='a b'`,
		`host=h user=u`:                                 `host=h user=u`,
		`password=trailing\`:                            `password=xxxxx`,
		`host=h password=a\ b\ c`:                       `host=h password=xxxxx`,
		"host=h\npassword=pw\tdbname=d":                 "host=h\npassword=xxxxx\tdbname=d",
		`host=h password=pw password='again' dbname=d`:  `host=h password=xxxxx password=xxxxx dbname=d`,
		`host=h pass word=notread dbname=d password=pw`: `host=h pass word=notread dbname=d password=xxxxx`,
	} {
		require.Equal(t, want, redactConninfo(conninfo), conninfo)
	}
}
