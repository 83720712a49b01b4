package main

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// redacted stands in for a credential in what the command prints.
const redacted = "xxxxx"

// redactURL returns rawURL fit to print: everything between its "://" (or
// its start) and its last "@" replaced by "xxxxx", whether or not it parses,
// so no piece of the user info shows however a parser would split it (an
// unencoded '/', '?' or '#' in a password ends the authority url.Parse
// reads). A URL with no "@" is returned as it is.
func redactURL(rawURL string) string {
	info, start, ok := userInfo(rawURL)
	if !ok {
		return rawURL
	}
	return rawURL[:start] + redacted + rawURL[start+len(info):]
}

// redactConnString returns rawURL, a URL or a PostgreSQL connection string
// in keyword/value form, fit to print: a URL's user info and password
// parameters, or each password setting's value, replaced by "xxxxx".
func redactConnString(rawURL string) string {
	if !strings.Contains(rawURL, "://") {
		return redactConninfo(rawURL)
	}
	shown := redactURL(rawURL)
	for _, p := range parameterPasswords(rawURL) {
		shown = strings.ReplaceAll(shown, "password="+p, "password="+redacted)
	}
	return shown
}

// checkFragment refuses rawURL when it holds a '#': url.Parse ends a URL at
// its fragment, so a '#' in a password cuts it there and go-redis reads what
// comes before as the host and port (and dials it). The error shows the URL
// redacted.
func checkFragment(rawURL string) error {
	if !strings.Contains(rawURL, "#") {
		return nil
	}
	return fmt.Errorf("%q holds a '#', where a URL ends (its fragment), so a password holding one would be cut there: percent-encode '#' as %%23 in the password", redactURL(rawURL))
}

// redactError returns err with the credentials of each of rawURLs taken
// out of its message: errors from url.Parse, go-redis or pgx may quote a
// URL. The result still wraps err.
func redactError(err error, rawURLs ...string) error {
	for _, u := range rawURLs {
		err = redactOne(err, u)
	}
	return err
}

func redactOne(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	// pgx quotes the connection string it could not parse, with the
	// passwords it could find taken out: not all of them (it ends a value
	// at its first space, escaped or not). It shows jobonce's redaction
	// instead.
	if pe := (*pgconn.ParseConfigError)(nil); errors.As(err, &pe) && pe.ConnString == rawURL {
		shown := *pe
		shown.ConnString = redactConnString(rawURL)
		clean = strings.Replace(clean, pe.Error(), shown.Error(), 1)
	}
	// url.Parse's reason may quote a piece of the user info, as in
	// `invalid port ":s3cr" after host` for "redis://u:s3cr/et@host".
	if ue := (*url.Error)(nil); errors.As(err, &ue) && ue.URL == rawURL {
		clean = strings.Replace(clean, ue.Error(), parseError(ue), 1)
	}
	clean = redactText(clean, rawURL)
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}

// parseError returns the message of ue, url.Parse's error, with its URL
// redacted and the reason it gives for the redacted URL, or, when that
// parses, a reason that quotes none of the user info.
func parseError(ue *url.Error) string {
	clean := redactURL(ue.URL)
	reason := "its user info does not parse: percent-encode the reserved characters (such as / ? # @) in the user name and password"
	if _, err := url.Parse(clean); err != nil {
		reason = err.Error()
		if ce := (*url.Error)(nil); errors.As(err, &ce) {
			reason = ce.Err.Error()
		}
	}
	return fmt.Sprintf("%s %q: %s", ue.Op, clean, reason)
}

// redactText returns s with rawURL replaced by redactURL(rawURL) and any of
// its credentials left over replaced by "xxxxx", as written in the URL,
// decoded, or quoted (%q).
func redactText(s, rawURL string) string {
	secrets := credentials(rawURL)
	if len(secrets) == 0 {
		return s
	}
	var pairs []string
	for _, form := range []string{rawURL, quoted(rawURL)} {
		pairs = append(pairs, form, redactURL(rawURL))
	}
	s = strings.NewReplacer(pairs...).Replace(s)
	var quotedSecrets []string
	for _, c := range secrets {
		quotedSecrets = append(quotedSecrets, quoted(c))
	}
	secrets = append(secrets, quotedSecrets...)
	// Longest first, so a password inside the user info goes with it, and
	// a tail of it with its "@" before a shorter piece.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	pairs = pairs[:0]
	for _, c := range slices.Compact(secrets) {
		if strings.HasSuffix(c, "@") {
			pairs = append(pairs, c, redacted+"@")
			continue
		}
		pairs = append(pairs, c, redacted)
	}
	return replaceWords(strings.NewReplacer(pairs...).Replace(s), userName(rawURL))
}

// replaceWords returns s with each of words replaced by "xxxxx" where it
// stands as a whole word: neither the character before it nor the one
// after is a letter, a digit or '_'. The longest word that fits wins.
func replaceWords(s string, words []string) string {
	if len(words) == 0 {
		return s
	}
	words = slices.Clone(words)
	slices.SortFunc(words, func(a, b string) int { return len(b) - len(a) })
	var b strings.Builder
	for i := 0; i < len(s); {
		n := 0
		if i == 0 || !wordByte(s[i-1]) {
			for _, w := range words {
				if strings.HasPrefix(s[i:], w) && (i+len(w) == len(s) || !wordByte(s[i+len(w)])) {
					n = len(w)
					break
				}
			}
		}
		if n == 0 {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(redacted)
		i += n
	}
	return b.String()
}

// wordByte reports whether c is part of a word for replaceWords: an ASCII
// letter or digit, '_', or a byte of a multi-byte character.
func wordByte(c byte) bool {
	return c == '_' || c >= utf8.RuneSelf || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// credentials returns the secret parts of rawURL, which redactText takes
// out wherever they appear: those of its user info, and the passwords it
// gives as parameters (see parameterPasswords). Those of its user info, as
// written and decoded: all of it, the password (after the first ":") or,
// with no password, the user. A '/' or '?' in it ends the authority
// url.Parse reads, so go-redis may quote what comes before as a host and
// port, or what comes after, up to the "@" and on, as a path or query:
// those pieces (but for a user name read as a host: see userName), and
// each tail of the user info with its "@", are secret too.
func credentials(rawURL string) []string {
	return append(userInfoCredentials(rawURL), parameterPasswords(rawURL)...)
}

func userInfoCredentials(rawURL string) []string {
	info, _, ok := userInfo(rawURL)
	if !ok || info == "" {
		return nil
	}
	_, pass, found := strings.Cut(info, ":")
	if !found && isPostgresURL(rawURL) && !strings.ContainsAny(info, "/?") {
		// A PostgreSQL URL's user info without ":" is a user name, where
		// Redis reads a password.
		return nil
	}
	parts := []string{info}
	if found && pass != "" {
		parts = append(parts, pass)
	}
	if authority, ok := splitAuthority(info); ok {
		_, port, _ := strings.Cut(authority, ":")
		for _, p := range []string{authority, port} {
			if p != "" {
				parts = append(parts, p)
			}
		}
		for i := range info {
			parts = append(parts, info[i:]+"@")
		}
	}
	return withDecoded(parts)
}

// splitAuthority returns the piece of info, a user info, that a parser
// reads as a host and port when a '/' or '?' in info ends the authority
// url.Parse reads: what comes before it.
func splitAuthority(info string) (string, bool) {
	end := strings.IndexAny(info, "/?")
	if end < 0 {
		return "", false
	}
	authority := info[:end]
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		authority = authority[i+1:]
	}
	return authority, true
}

// userName returns the user name that a parser reads as a host in
// rawURL's user info (see splitAuthority), as written and decoded.
// redactText takes it out only where it stands as a whole word: a
// one-letter user name is no reason to blank that letter in every word.
func userName(rawURL string) []string {
	info, _, _ := userInfo(rawURL)
	authority, ok := splitAuthority(info)
	user, _, found := strings.Cut(authority, ":")
	if !ok || !found || user == "" {
		return nil
	}
	return withDecoded([]string{user})
}

// withDecoded returns parts and, after them, those that percent-decode to
// something else, decoded.
func withDecoded(parts []string) []string {
	for _, p := range slices.Clone(parts) {
		if dec, err := url.PathUnescape(p); err == nil && dec != p {
			parts = append(parts, dec)
		}
	}
	return parts
}

// isPostgresURL reports whether rawURL has a PostgreSQL scheme.
func isPostgresURL(rawURL string) bool {
	return strings.HasPrefix(rawURL, "postgres://") || strings.HasPrefix(rawURL, "postgresql://")
}

// parameterPasswords returns the passwords rawURL gives as parameters, as
// written and decoded, which pgx reads from a URL's query
// (postgres://host/db?password=...) and from keyword/value settings
// ("host=... password=...", read as libpq reads them: see
// conninfoSettings).
func parameterPasswords(rawURL string) []string {
	var found []string
	if _, query, ok := strings.Cut(rawURL, "?"); ok && strings.Contains(rawURL, "://") {
		for pair := range strings.SplitSeq(query, "&") {
			name, value, _ := strings.Cut(pair, "=")
			if strings.HasSuffix(name, "password") && value != "" {
				found = append(found, value)
			}
		}
	} else {
		for _, st := range conninfoSettings(rawURL) {
			if isPasswordKeyword(st.keyword) && st.raw != "" {
				found = append(found, st.raw)
				if st.value != st.raw {
					found = append(found, st.value)
				}
			}
		}
	}
	for _, p := range slices.Clone(found) {
		if dec, err := url.QueryUnescape(p); err == nil && dec != p {
			found = append(found, dec)
		}
	}
	return found
}

// userInfo returns the user info of rawURL as written, and where it starts:
// what lies between its "://" (or its start) and its last "@". That may take
// more than url.Parse reads as the user info, never less.
func userInfo(rawURL string) (info string, start int, ok bool) {
	if i := strings.Index(rawURL, "://"); i >= 0 {
		start = i + len("://")
	}
	at := strings.LastIndex(rawURL[start:], "@")
	if at < 0 {
		return "", 0, false
	}
	return rawURL[start : start+at], start, true
}

// quoted returns s as %q writes it, without the quotes.
func quoted(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// redactedError is an error whose message has had credentials taken out.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
