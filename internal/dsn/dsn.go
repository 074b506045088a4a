package dsn

import (
	"net/url"
	"sort"
	"strings"
	"unicode"
)

// Mask replaces a password.
const Mask = "xxxxx"

// Redact returns s with every password replaced by Mask.
func Redact(s string) string {
	r, _ := parse(s)
	return r
}

// Password returns the password in s ("" when there is none).
func Password(s string) string {
	_, secrets := parse(s)
	if len(secrets) == 0 {
		return ""
	}
	return secrets[0]
}

// Scrub returns text (typically a driver's error message) with the password of dsn, and
// the dsn itself, replaced by their redacted forms. Drivers are careful not to print
// passwords, but a wrapped error from anywhere may quote the DSN it was given, and a
// password the driver split differently from its writer's intent (a PostgreSQL URL whose
// password holds '@') may reach a message as part of a host name: every part of it is
// replaced too.
func Scrub(text, dsn string) string {
	redacted, secrets := parse(dsn)
	if dsn != "" && dsn != redacted {
		text = strings.ReplaceAll(text, dsn, redacted)
	}
	var all []string
	for _, pw := range secrets {
		if pw == "" {
			continue
		}
		all = append(all, pw, url.QueryEscape(pw), url.PathEscape(pw))
	}
	sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) }) // whole before parts
	for _, pw := range all {
		if pw != "" {
			text = strings.ReplaceAll(text, pw, Mask)
		}
	}
	return text
}

// parse returns the redacted form of s and the secrets it found: the password first,
// then the parts of it that a driver may print on their own.
func parse(s string) (redacted string, secrets []string) {
	switch {
	case hasPostgresScheme(s):
		return redactPostgresURL(s)
	case strings.Contains(s, "://"):
		r, pw := redactURL(s)
		return r, []string{pw}
	case isKeywordForm(s):
		r, pw := redactKeywords(s)
		return r, []string{pw}
	default:
		r, pw := redactMySQL(s)
		return r, []string{pw}
	}
}

// isKeywordForm reports whether s starts with "name=" (pgx/libpq keyword form or ADO
// form). A go-sql-driver DSN never does: the part before its first '=' holds '@', '/',
// '(' or ':'.
func isKeywordForm(s string) bool {
	i := strings.IndexByte(s, '=')
	if i <= 0 {
		return false
	}
	name := strings.TrimSpace(s[:i])
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == ' ' || r == '.') {
			return false
		}
	}
	return true
}

func isPasswordKey(k string) bool {
	switch strings.ToLower(strings.TrimSpace(k)) {
	case "password", "pwd", "passwd", "pass", "sslpassword":
		return true
	}
	return false
}

// redactURL handles scheme://user:password@host/... with passwords in the userinfo or in
// query parameters.
func redactURL(s string) (string, string) {
	u, err := url.Parse(s)
	if err != nil {
		return redactBrokenURL(s)
	}
	var pw string
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			pw = p
			u.User = url.UserPassword(u.User.Username(), Mask)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		changed := false
		for k, vs := range q {
			if isPasswordKey(k) {
				for i := range vs {
					if pw == "" {
						pw = vs[i]
					}
					vs[i] = Mask
				}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.String(), pw
}

// redactBrokenURL handles a URL that net/url refuses (an unescaped character in the
// password, typically): everything between "://" and the last '@' of the authority is
// user information; only the user name survives.
func redactBrokenURL(s string) (string, string) {
	i := strings.Index(s, "://")
	scheme, rest := s[:i+3], s[i+3:]
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		// No user information: nothing secret in the authority, but the URL did not parse,
		// so keep only the scheme rather than guess.
		return scheme + Mask, ""
	}
	info, host := rest[:at], rest[at+1:]
	user, pw, ok := strings.Cut(info, ":")
	if !ok {
		return scheme + user + "@" + host, ""
	}
	return scheme + user + ":" + Mask + "@" + host, pw
}

// redactKeywords handles "k=v k2='v 2'" (pgx/libpq) and "k=v;k2=v2" (ADO) strings.
func redactKeywords(s string) (string, string) {
	var b strings.Builder
	var pw string
	sep := byte(' ')
	if strings.IndexByte(s, ';') >= 0 {
		sep = ';'
	}
	i := 0
	for i < len(s) {
		// Copy separators and spaces.
		for i < len(s) && (s[i] == sep || s[i] == ' ' || s[i] == '\t') {
			b.WriteByte(s[i])
			i++
		}
		if i >= len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			b.WriteString(s[i:])
			break
		}
		key := s[i : i+eq]
		b.WriteString(key)
		b.WriteByte('=')
		i += eq + 1
		for i < len(s) && s[i] == ' ' && sep == ' ' {
			b.WriteByte(' ')
			i++
		}
		start := i
		value, n := keywordValue(s[i:], sep)
		i += n
		if isPasswordKey(key) {
			if pw == "" {
				pw = value
			}
			b.WriteString(Mask)
		} else {
			b.WriteString(s[start:i])
		}
	}
	return b.String(), pw
}

// keywordValue reads one value: quoted ('...' with backslash escapes for libpq; "..." or
// {...} for ADO) or up to the next separator. It returns the unquoted value and the bytes
// consumed.
func keywordValue(s string, sep byte) (string, int) {
	if s == "" {
		return "", 0
	}
	var closing byte
	switch s[0] {
	case '\'':
		closing = '\''
	case '"':
		closing = '"'
	case '{':
		closing = '}'
	}
	if closing != 0 {
		var v strings.Builder
		for i := 1; i < len(s); i++ {
			c := s[i]
			if c == '\\' && closing == '\'' && i+1 < len(s) {
				v.WriteByte(s[i+1])
				i++
				continue
			}
			if c == closing {
				if i+1 < len(s) && s[i+1] == closing && closing != '\'' {
					v.WriteByte(c) // ADO doubles the closing character
					i++
					continue
				}
				return v.String(), i + 1
			}
			v.WriteByte(c)
		}
		return v.String(), len(s) // unterminated: all of it is the value
	}
	end := strings.IndexByte(s, sep)
	if sep == ' ' {
		if t := strings.IndexByte(s, '\t'); t >= 0 && (end < 0 || t < end) {
			end = t
		}
	}
	if end < 0 {
		end = len(s)
	}
	return s[:end], end
}

// redactMySQL handles go-sql-driver's [user[:password]@][net[(addr)]]/dbname[?params],
// splitting it the way the driver does: the last '/' ends the address, the last '@'
// before it ends the user information, the first ':' in that separates the password.
func redactMySQL(s string) (string, string) {
	slash := strings.LastIndexByte(s, '/')
	if slash < 0 {
		slash = len(s)
	}
	at := strings.LastIndexByte(s[:slash], '@')
	if at < 0 {
		return s, ""
	}
	colon := strings.IndexByte(s[:at], ':')
	if colon < 0 {
		return s, ""
	}
	return s[:colon+1] + Mask + s[at:], s[colon+1 : at]
}

// Host returns the host (and port) that s points at, for error messages; "" when s names
// none that can be told.
func Host(s string) string {
	switch {
	case hasPostgresScheme(s):
		return postgresHost(s)
	case strings.Contains(s, "://"):
		if u, err := url.Parse(s); err == nil {
			return u.Host
		}
		_, rest, _ := strings.Cut(s, "://")
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			rest = rest[at+1:]
		}
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			rest = rest[:i]
		}
		return rest
	case isKeywordForm(s):
		var host, port string
		sep := byte(' ')
		if strings.IndexByte(s, ';') >= 0 {
			sep = ';'
		}
		for _, kv := range splitKeywords(s, sep) {
			switch strings.ToLower(strings.TrimSpace(kv[0])) {
			case "host", "server", "data source", "address", "addr":
				host = kv[1]
			case "port":
				port = kv[1]
			}
		}
		if host != "" && port != "" {
			return host + ":" + port
		}
		return host
	default:
		slash := strings.LastIndexByte(s, '/')
		if slash < 0 {
			slash = len(s)
		}
		addr := s[:slash]
		if at := strings.LastIndexByte(addr, '@'); at >= 0 {
			addr = addr[at+1:]
		}
		if open := strings.IndexByte(addr, '('); open >= 0 && strings.HasSuffix(addr, ")") {
			return addr[open+1 : len(addr)-1]
		}
		if addr == "" || addr == "tcp" {
			return "127.0.0.1:3306" // the driver's default
		}
		return addr
	}
}

func splitKeywords(s string, sep byte) [][2]string {
	var out [][2]string
	i := 0
	for i < len(s) {
		for i < len(s) && (s[i] == sep || s[i] == ' ' || s[i] == '\t') {
			i++
		}
		eq := strings.IndexByte(s[i:], '=')
		if i >= len(s) || eq < 0 {
			break
		}
		key := s[i : i+eq]
		i += eq + 1
		for i < len(s) && s[i] == ' ' && sep == ' ' {
			i++
		}
		v, n := keywordValue(s[i:], sep)
		i += n
		out = append(out, [2]string{key, v})
	}
	return out
}
