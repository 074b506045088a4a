package sqlserver

import (
	"errors"
	"fmt"
	"strings"
)

// A small T-SQL lexer for server-free checks: it knows exactly the quoting rules the
// store relies on ([...] with ]] inside, '...' with '' inside, -- and /* */ comments)
// and nothing else.

type tokKind int

const (
	tokOther  tokKind = iota // keywords, operators, whitespace, parameters, numbers
	tokIdent                 // [delimited identifier]
	tokString                // '...' (the N prefix is part of the preceding tokOther)
)

type token struct {
	kind tokKind
	text string // raw text for tokOther; the unescaped value for tokIdent and tokString
}

// parseBracket reads a delimited identifier at the start of s and returns its value and
// the rest of s.
func parseBracket(s string) (name, rest string, err error) {
	if !strings.HasPrefix(s, "[") {
		return "", s, errors.New("no opening [")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != ']' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == ']' {
			b.WriteByte(']')
			i++
			continue
		}
		return b.String(), s[i+1:], nil
	}
	return "", "", errors.New("unterminated [identifier")
}

// parseString reads a '...' literal at the start of s.
func parseString(s string) (value, rest string, err error) {
	if !strings.HasPrefix(s, "'") {
		return "", s, errors.New("no opening '")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '\'' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		return b.String(), s[i+1:], nil
	}
	return "", "", errors.New("unterminated 'literal")
}

// parseNString reads an N'...' literal at the start of s.
func parseNString(s string) (value, rest string, err error) {
	if !strings.HasPrefix(s, "N'") {
		return "", s, errors.New("no opening N'")
	}
	return parseString(s[1:])
}

// lex splits s into tokens and checks that every identifier, literal and comment ends
// and that parentheses balance outside them.
func lex(s string) ([]token, error) {
	var toks []token
	var other strings.Builder
	flush := func() {
		if other.Len() > 0 {
			toks = append(toks, token{tokOther, other.String()})
			other.Reset()
		}
	}
	depth := 0
	for len(s) > 0 {
		switch {
		case s[0] == '[':
			flush()
			name, rest, err := parseBracket(s)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tokIdent, name})
			s = rest
		case s[0] == '\'':
			flush()
			v, rest, err := parseString(s)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tokString, v})
			s = rest
		case strings.HasPrefix(s, "--"):
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				i = len(s)
			}
			other.WriteString(s[:i])
			s = s[i:]
		case strings.HasPrefix(s, "/*"):
			i := strings.Index(s, "*/")
			if i < 0 {
				return nil, errors.New("unterminated /* comment")
			}
			other.WriteString(s[:i+2])
			s = s[i+2:]
		case s[0] == '"':
			return nil, errors.New(`unexpected " (the store never uses quoted identifiers)`)
		case s[0] == ']':
			return nil, errors.New("] outside an identifier")
		default:
			switch s[0] {
			case '(':
				depth++
			case ')':
				depth--
				if depth < 0 {
					return nil, errors.New("unbalanced )")
				}
			}
			other.WriteByte(s[0])
			s = s[1:]
		}
	}
	flush()
	if depth != 0 {
		return nil, fmt.Errorf("%d unclosed (", depth)
	}
	return toks, nil
}

// shape is the token sequence with identifier and literal values blanked: two scripts
// with the same shape differ only inside names and literals.
func shape(toks []token) []token {
	out := make([]token, len(toks))
	for i, t := range toks {
		if t.kind != tokOther {
			t.text = ""
		}
		out[i] = t
	}
	return out
}
