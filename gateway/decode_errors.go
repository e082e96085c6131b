package gateway

// The standard library's decoder reads a refused body a second time,
// token by token: its tokens and offsets are exact where the fast
// decoder's errors name Go fields and types ("field "Token" must be
// int64"), cut the value off, or name the wrong cause ("expected comma"
// for 1.5). Accepted bodies never take this path.
import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// refusal explains why a JSON body b, meant for the request body type t,
// was refused, in the body's own terms: the member's JSON path, the JSON
// type it must have and what it holds. It is "" when it finds nothing
// wrong (the caller then says what the fast decoder said).
func refusal(b []byte, t reflect.Type) string {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	w := walker{d: d, size: len(b)}
	if msg := w.value("", t); msg != "" {
		return msg
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return fmt.Sprintf("malformed JSON: data after the object at byte %d", d.InputOffset())
	}
	return ""
}

// walker reads a body's tokens against the Go type it decodes into.
type walker struct {
	d       *json.Decoder
	size    int
	started bool
}

var rawValueType = reflect.TypeFor[rawValue]()

// value reads the value at path, which must suit t; a JSON null suits
// every type (it leaves the member unset, as in the decoder).
func (w *walker) value(path string, t reflect.Type) string {
	tok, err := w.d.Token()
	if err != nil {
		return w.syntax(err)
	}
	w.started = true
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case tok == nil:
		return ""
	case t == rawValueType: // any JSON value; its own decoder judges it
		return w.skip(tok)
	case t.Kind() == reflect.Struct && tok == json.Delim('{'):
		return w.object(path, t)
	case t.Kind() == reflect.Slice && tok == json.Delim('['):
		return w.array(path, t.Elem())
	case t.Kind() == reflect.String:
		if _, ok := tok.(string); ok {
			return ""
		}
	case t.Kind() == reflect.Int64:
		if n, ok := tok.(json.Number); ok {
			return integer(path, n)
		}
	}
	return fmt.Sprintf("%s must be %s, got %s", member(path), jsonType(t), describe(tok))
}

func (w *walker) object(path string, t reflect.Type) string {
	for w.d.More() {
		tok, err := w.d.Token()
		if err != nil {
			return w.syntax(err)
		}
		name, _ := tok.(string)
		f, ok := fieldOf(t, name)
		if !ok {
			return fmt.Sprintf("unknown member %q; the members here are %s", join(path, name), strings.Join(members(t), ", "))
		}
		if msg := w.value(join(path, name), f.Type); msg != "" {
			return msg
		}
	}
	return w.end()
}

func (w *walker) array(path string, elem reflect.Type) string {
	for i := 0; w.d.More(); i++ {
		if msg := w.value(fmt.Sprintf("%s[%d]", path, i), elem); msg != "" {
			return msg
		}
	}
	return w.end()
}

// end reads the closing delimiter of an object or array.
func (w *walker) end() string {
	if _, err := w.d.Token(); err != nil {
		return w.syntax(err)
	}
	return ""
}

// skip reads the rest of a value that began with tok, without
// recursion: a raw value may nest as deep as the body is long.
func (w *walker) skip(tok json.Token) string {
	for depth := opens(tok); depth > 0; {
		tok, err := w.d.Token()
		if err != nil {
			return w.syntax(err)
		}
		depth += opens(tok)
	}
	return ""
}

func opens(tok json.Token) int {
	switch tok {
	case json.Delim('{'), json.Delim('['):
		return 1
	case json.Delim('}'), json.Delim(']'):
		return -1
	}
	return 0
}

func (w *walker) syntax(err error) string {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF) && !w.started:
		return "the body is empty; it must be an object"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("malformed JSON: the body ends after %d bytes, before its value is complete", w.size)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	}
	return "malformed JSON: " + err.Error()
}

// integer holds a JSON number to int64, the type of every integer member.
func integer(path string, n json.Number) string {
	_, err := strconv.ParseInt(string(n), 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return fmt.Sprintf("%s must be an integer of at most 64 bits, got %s", member(path), describe(n))
	case err != nil:
		return fmt.Sprintf("%s must be an integer, got %s", member(path), describe(n))
	}
	return ""
}

// fieldOf finds the field of struct t that the JSON member name decodes
// into: its exact name, else one equal in another case (as the decoders
// match).
func fieldOf(t reflect.Type, name string) (reflect.StructField, bool) {
	var folded *reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		switch tag := jsonName(f); {
		case tag == name:
			return f, true
		case folded == nil && strings.EqualFold(tag, name):
			folded = &f
		}
	}
	if folded != nil {
		return *folded, true
	}
	return reflect.StructField{}, false
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

func members(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		names = append(names, jsonName(t.Field(i)))
	}
	return names
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func member(path string) string {
	if path == "" {
		return "the body"
	}
	return fmt.Sprintf("member %q", path)
}

// jsonType names the JSON type that values of Go type t are sent as.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Int64:
		return "an integer"
	}
	return t.Kind().String()
}

// describe names a token's JSON type and shows its value, cut to a
// readable length.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return "an object"
	case string:
		shown, rest := cut(v)
		return "string " + strconv.Quote(shown) + rest
	case json.Number:
		shown, rest := cut(string(v))
		return "number " + shown + rest
	case bool:
		return "boolean " + strconv.FormatBool(v)
	}
	return fmt.Sprint(tok)
}

// describeRaw is describe for a raw JSON value that the decoder found
// well formed: what it begins with decides its type.
func describeRaw(raw []byte) string {
	b := bytes.TrimLeft(raw, " \t\r\n")
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return describe(json.Delim('{'))
	case '[':
		return describe(json.Delim('['))
	case '"':
		p := jsonScan{b: b}
		s, _ := p.str()
		return describe(string(s))
	case 't', 'f':
		return describe(b[0] == 't')
	case 'n':
		return "null"
	}
	end := bytes.IndexAny(b, ",}] \t\r\n")
	if end < 0 {
		end = len(b)
	}
	return describe(json.Number(b[:end]))
}

// shownBytes is how much of a value a refusal quotes.
const shownBytes = 40

// cut is s cut to at most shownBytes at a character boundary, and what
// says so when it was cut.
func cut(s string) (string, string) {
	if len(s) <= shownBytes {
		return s, ""
	}
	n := shownBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], fmt.Sprintf("... (%d bytes)", len(s))
}
