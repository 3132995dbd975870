package debezium

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// scanner is a byte-level JSON reader that walks a document once without
// building a tree: callers ask for the token they expect next. Errors are
// sticky (the first one wins) so call sites can check once per value.
type scanner struct {
	b    []byte
	i    int
	err  error
	slab *valueSlab // where decoded rows are cut from (nil: allocate)
}

var errSyntax = errors.New("json syntax")

func (s *scanner) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w at byte %d: %s", errSyntax, s.i, fmt.Sprintf(format, args...))
	}
	s.i = len(s.b) // stop every loop
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte without consuming it (0 at end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) bool {
	if s.peek() != c {
		s.fail("want %q", c)
		return false
	}
	s.i++
	return true
}

// end checks that only white space follows.
func (s *scanner) end() {
	if s.peek() != 0 && s.err == nil {
		s.fail("trailing data")
	}
}

// null consumes a literal null if it is next.
func (s *scanner) null() bool {
	if s.peek() == 'n' {
		if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
			s.i += 4
			return true
		}
		s.fail("bad literal")
	}
	return false
}

// member advances to the next member of an object whose '{' has been
// consumed (first tells whether any member was read) and returns its raw
// key (without quotes; esc tells whether it holds escapes). ok is false
// after the closing '}' or on error.
func (s *scanner) member(first bool) (key []byte, esc bool, ok bool) {
	c := s.peek()
	if c == '}' {
		s.i++
		return nil, false, false
	}
	if !first {
		if c != ',' {
			s.fail("want ',' or '}'")
			return nil, false, false
		}
		s.i++
	}
	key, esc = s.rawString()
	if s.err != nil || !s.expect(':') {
		return nil, false, false
	}
	return key, esc, true
}

// element advances to the next element of an array whose '[' has been
// consumed; ok is false after the closing ']' or on error.
func (s *scanner) element(first bool) bool {
	c := s.peek()
	if c == ']' {
		s.i++
		return false
	}
	if !first {
		if c != ',' {
			s.fail("want ',' or ']'")
			return false
		}
		s.i++
	}
	if s.peek() == 0 {
		s.fail("unterminated array")
		return false
	}
	return true
}

// plainByte marks the bytes a string body can hold without a closer look:
// not the quote, not the backslash, not a control character.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// rawString reads a string token and returns its bytes between the quotes.
func (s *scanner) rawString() (raw []byte, esc bool) {
	if s.peek() != '"' {
		s.fail("want string")
		return nil, false
	}
	s.i++
	start := s.i
	b := s.b
	for {
		i := s.i
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		s.i = i
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			s.i++
			return b[start:i], esc
		case c == '\\':
			esc = true
			s.i += 2
		default:
			s.fail("control character in string")
			return nil, false
		}
	}
	s.fail("unterminated string")
	return nil, false
}

// str reads a string token as a Go string.
func (s *scanner) str() string {
	raw, esc := s.rawString()
	if s.err != nil {
		return ""
	}
	if !esc {
		return string(raw)
	}
	out, err := unescape(raw)
	if err != nil {
		s.fail("%v", err)
		return ""
	}
	return out
}

func unescape(raw []byte) (string, error) {
	out, err := unescapeInto(make([]byte, 0, len(raw)), raw)
	if err != nil || len(out) == 0 {
		return "", err
	}
	// out is never written again: the string can share its memory, which
	// saves the copy string(out) would make.
	return unsafe.String(&out[0], len(out)), nil
}

// unescapeInto appends the unescaped form of a JSON string body to out.
func unescapeInto(out, raw []byte) ([]byte, error) {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(raw) {
			return nil, errors.New("bad escape")
		}
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw[i+1:])
			if !ok {
				return nil, errors.New("bad \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if len(raw) >= i+7 && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if r2, ok := hex4(raw[i+3:]); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							r = d
							i += 6
						}
					}
				}
			}
			if utf16.IsSurrogate(r) {
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, errors.New("bad escape")
		}
	}
	return out, nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// number reads a number token; isInt tells whether it has no fraction or
// exponent (then i holds it, else f does).
func (s *scanner) number() (i int64, f float64, isInt bool) {
	s.ws()
	start := s.i
	neg := false
	if s.i < len(s.b) && s.b[s.i] == '-' {
		neg = true
		s.i++
	}
	var u uint64
	digits := 0
	overflow := false
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c < '0' || c > '9' {
			break
		}
		if u > (1<<63)/10 {
			overflow = true
		}
		u = u*10 + uint64(c-'0')
		digits++
		s.i++
	}
	if digits == 0 {
		s.fail("want number")
		return 0, 0, false
	}
	if digits > 1 && s.b[start+boolInt(neg)] == '0' {
		s.fail("leading zero")
		return 0, 0, false
	}
	frac := false
	if s.i < len(s.b) && s.b[s.i] == '.' {
		frac = true
		s.i++
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		if n == 0 {
			s.fail("bad fraction")
			return 0, 0, false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		frac = true
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		if n == 0 {
			s.fail("bad exponent")
			return 0, 0, false
		}
	}
	if !frac && !overflow && (u <= 1<<63-1 || (neg && u == 1<<63)) {
		if neg {
			return -int64(u), 0, true
		}
		return int64(u), 0, true
	}
	v, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		s.fail("bad number")
		return 0, 0, false
	}
	return 0, v, false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// boolean reads true or false.
func (s *scanner) boolean() bool {
	s.ws()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true" {
		s.i += 4
		return true
	}
	if len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false" {
		s.i += 5
		return false
	}
	s.fail("want boolean")
	return false
}

// skip consumes one value of any type, checking its syntax.
func (s *scanner) skip() {
	s.skipDepth(0)
}

func (s *scanner) skipDepth(depth int) {
	if depth > 512 {
		s.fail("nested too deep")
		return
	}
	switch c := s.peek(); {
	case c == '{':
		s.i++
		for first := true; ; first = false {
			_, _, ok := s.member(first)
			if !ok {
				return
			}
			s.skipDepth(depth + 1)
		}
	case c == '[':
		s.i++
		for first := true; s.element(first); first = false {
			s.skipDepth(depth + 1)
		}
	case c == '"':
		s.rawString()
	case c == 't' || c == 'f':
		s.boolean()
	case c == 'n':
		if !s.null() {
			s.fail("bad literal")
		}
	case c == '-' || (c >= '0' && c <= '9'):
		s.number()
	default:
		s.fail("unexpected %q", c)
	}
}

// span consumes one value and returns its raw bytes.
func (s *scanner) span() []byte {
	s.ws()
	start := s.i
	s.skip()
	if s.err != nil {
		return nil
	}
	return s.b[start:s.i]
}
