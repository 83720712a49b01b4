package main

import "strings"

// setting is one keyword=value pair of a PostgreSQL connection string in
// keyword/value form ("host=h password='p w'").
type setting struct {
	keyword string
	value   string // unquoted and unescaped, as libpq passes it on
	raw     string // as written, between its quotes if it has them
	// start and end bound the value as written in the string, its quotes
	// included.
	start, end int
}

// conninfoSpace reports the characters libpq (and pgx) read as space
// between settings.
func conninfoSpace(c byte) bool { return strings.IndexByte(" \t\n\r\v\f", c) >= 0 }

// conninfoSettings returns the settings of s, a connection string in
// keyword/value form, read as libpq and pgx read them: a keyword, "=" with
// optional space around it, and a value that is either a run of non-space
// characters or quoted with '; in both, a backslash takes the next
// character as it is (a space, a quote, a backslash). A quoted value left
// open runs to the end of s. Reading stops at a keyword with no "=".
func conninfoSettings(s string) []setting {
	var settings []setting
	i := 0
	for {
		for i < len(s) && conninfoSpace(s[i]) {
			i++
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return settings
		}
		keyword := strings.Trim(s[i:i+eq], " \t\n\r\v\f")
		if sp := strings.LastIndexAny(keyword, " \t\n\r\v\f"); sp >= 0 {
			keyword = keyword[sp+1:] // pgx refuses it; its value is read all the same
		}
		i += eq + 1
		for i < len(s) && conninfoSpace(s[i]) {
			i++
		}
		st := setting{keyword: keyword, start: i}
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		from := i
		var value strings.Builder
		closed := false
		for i < len(s) {
			c := s[i]
			if quoted && c == '\'' {
				closed = true
				break
			}
			if !quoted && conninfoSpace(c) {
				break
			}
			if c == '\\' {
				i++
				if i == len(s) {
					break // a trailing backslash, which libpq drops
				}
				c = s[i]
			}
			value.WriteByte(c)
			i++
		}
		st.raw, st.value = s[from:i], value.String()
		if closed {
			i++
		}
		st.end = i
		settings = append(settings, st)
	}
}

// isPasswordKeyword reports whether a setting's value is a secret: password,
// sslpassword.
func isPasswordKeyword(keyword string) bool { return strings.HasSuffix(keyword, "password") }

// redactConninfo returns s, a connection string in keyword/value form, with
// the value of each password setting, quotes and all, replaced by "xxxxx".
func redactConninfo(s string) string {
	var b strings.Builder
	last := 0
	for _, st := range conninfoSettings(s) {
		if !isPasswordKeyword(st.keyword) {
			continue
		}
		b.WriteString(s[last:st.start])
		b.WriteString(redacted)
		last = st.end
	}
	b.WriteString(s[last:])
	return b.String()
}
