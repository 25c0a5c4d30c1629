package repro

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
	"unicode"
	"unicode/utf8"
)

// text is a string from outside Themis's own code (a finding's id, kind,
// detail and trace, a lane's spec, a kernel, a checker's output) in the
// templates' data. It prints only through an escaping func of the context
// it lands in (escapers): printed as it is, it writes poison, and the
// rendering fails. A template cannot leave a field unquoted.
type text string

// poison is what a text prints as without an escaper.
const poison = "\x00repro: a template printed a field without an escaper\x00"

// String implements fmt.Stringer: the poison.
func (text) String() string { return poison }

func texts(ss []string) []text {
	out := make([]text, len(ss))
	for i, s := range ss {
		out[i] = text(s)
	}
	return out
}

// escapers are the templates' funcs, one per context:
//
//	sh        one shell word (single-quoted unless plain)
//	bash      one bash word: as sh where printable ASCII, else $'...'
//	          with every other byte \xNN (an fstests test)
//	join      shell words (a command line: the first never an assignment)
//	shcomment text in a `#` comment: one line, printable
//	cstr      a C string literal
//	ccomment  text in a C comment (/* */ or //): one line, printable, no
//	          "*/", "/*", "??" or backslash
//	line      one line of plain text (README): printable
//	para      plain text of several lines: printable, newlines kept
var escapers = template.FuncMap{
	"sh":   func(v any) (string, error) { s, err := plain(v); return shellQuote(s), err },
	"bash": func(v any) (string, error) { s, err := plain(v); return bashQuote(s), err },
	"join": func(v []text) string {
		q := make([]string, len(v))
		for i, w := range v {
			q[i] = shellQuote(string(w))
		}
		if len(q) > 0 {
			q[0] = commandWord(q[0])
		}
		return strings.Join(q, " ")
	},
	"shcomment": func(v any) (string, error) { s, err := plain(v); return printable(s, false), err },
	"cstr":      func(v any) (string, error) { s, err := plain(v); return cStr(s), err },
	"ccomment":  func(v any) (string, error) { s, err := plain(v); return cComment(s), err },
	"line":      func(v any) (string, error) { s, err := plain(v); return printable(s, false), err },
	"para":      func(v any) (string, error) { s, err := plain(v); return printable(s, true), err },
}

// plain is a template value as the string an escaper quotes.
func plain(v any) (string, error) {
	switch v := v.(type) {
	case text:
		return string(v), nil
	case string:
		return v, nil
	}
	return "", fmt.Errorf("escaper of a %T: want a string", v)
}

// render executes one template and refuses output that holds the poison.
func render(t *template.Template, name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("repro: %s: %w", name, err)
	}
	if bytes.Contains(b.Bytes(), []byte(poison)) {
		return nil, fmt.Errorf("repro: %s: a field printed without an escaper", name)
	}
	return b.Bytes(), nil
}

// printable is s with every rune that is not printable (controls, format
// characters such as bidirectional overrides, invalid UTF-8) written as a
// \x or \u escape; newlines too unless keepNewlines. Tabs stay.
func printable(s string, keepNewlines bool) string {
	return escape(s, func(r rune) bool { return r == '\t' || r == '\n' && keepNewlines || unicode.IsPrint(r) })
}

// cComment is s as text inside a C comment: one printable line (so a //
// comment never ends early), a backslash written \x5c (so none splices the
// next line), and "*/", "/*" and "??" (a trigraph) broken up.
func cComment(s string) string {
	s = escape(s, func(r rune) bool { return r == '\t' || unicode.IsPrint(r) && r != '\\' })
	return strings.NewReplacer("*/", `*\x2f`, "/*", `/\x2a`, "??", `?\x3f`).Replace(s)
}

// escape writes the runes keep refuses, and invalid UTF-8, as \xNN (ASCII,
// bytes), \uNNNN or \UNNNNNNNN escapes.
func escape(s string, keep func(rune) bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keep(r):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// bashQuote is s as one bash word: shellQuote's where s is printable
// ASCII, else ANSI-C quoted ($'...'), every byte outside printable ASCII
// written \xNN (exactly two digits: none runs into the next character),
// so that the script holds no control character or invalid UTF-8.
func bashQuote(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
		return shellQuote(s)
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
