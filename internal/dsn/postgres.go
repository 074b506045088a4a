package dsn

import (
	"net/url"
	"strings"
)

// hasPostgresScheme reports whether s is a PostgreSQL URL, which pgx (like libpq) splits
// with its own parser rather than net/url's.
func hasPostgresScheme(s string) bool {
	lower := strings.ToLower(s)
	return strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://")
}

// postgresParts splits a PostgreSQL URL into scheme ("postgres://"), user information
// and the rest (host list, path, query). pgx looks for the user information up to the
// first '/' and ends it at the first '@'; a writer who put an unescaped '@' in the
// password meant the last one. The user information here runs to the last '@' before
// the first '/', so that it holds the password under either reading.
func postgresParts(s string) (scheme, info, rest string, hasInfo bool) {
	i := strings.Index(s, "://") + 3
	scheme, rest = s[:i], s[i:]
	auth := rest
	if slash := strings.IndexByte(auth, '/'); slash >= 0 {
		auth = auth[:slash]
	}
	at := strings.LastIndexByte(auth, '@')
	if at < 0 {
		return scheme, "", rest, false
	}
	return scheme, rest[:at], rest[at+1:], true
}

// redactPostgresURL masks the password of a PostgreSQL URL, in the user information and
// in the query. The secrets are the password as written and percent-decoded, and each of
// its '@'-separated parts: pgx ends the password at the first '@' and reads the rest as
// a host name, which its errors print ("lookup Secret123@db: no such host").
func redactPostgresURL(s string) (string, []string) {
	scheme, info, rest, hasInfo := postgresParts(s)
	var secrets []string
	var b strings.Builder
	b.WriteString(scheme)
	if hasInfo {
		user, pw, hasPw := strings.Cut(info, ":")
		b.WriteString(user)
		if hasPw {
			b.WriteString(":" + Mask)
			secrets = append(secrets, unescape(pw))
			if raw := pw; raw != unescape(pw) {
				secrets = append(secrets, raw)
			}
			if parts := strings.Split(pw, "@"); len(parts) > 1 {
				for _, p := range parts {
					secrets = append(secrets, p, unescape(p))
				}
			}
		}
		b.WriteByte('@')
	}
	r, qs := redactQuery(rest)
	b.WriteString(r)
	return b.String(), append(secrets, qs...)
}

// redactQuery masks the values of password parameters in "host/db?k=v&k2=v2", keeping
// everything else byte for byte.
func redactQuery(s string) (string, []string) {
	head, query, ok := strings.Cut(s, "?")
	if !ok {
		return s, nil
	}
	var secrets []string
	params := strings.Split(query, "&")
	for i, kv := range params {
		k, v, ok := strings.Cut(kv, "=")
		if ok && isPasswordKey(unescape(k)) {
			secrets = append(secrets, unescape(v), v)
			params[i] = k + "=" + Mask
		}
	}
	return head + "?" + strings.Join(params, "&"), secrets
}

// unescape percent-decodes s as pgx does ('+' stays '+'); s itself when it does not
// decode.
func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

// postgresHost returns the host list (and ports) of a PostgreSQL URL, after the user
// information.
func postgresHost(s string) string {
	_, _, rest, _ := postgresParts(s)
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
