package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sample() Batch {
	return Batch{OwnerID: "worker-1", Token: 42, BatchID: "b-7", Records: []Record{
		{Key: []byte("k"), Value: bytes.Repeat([]byte{0, 1, 2}, 400),
			Headers: []Header{{Name: "app", Value: []byte("x")}, {Name: "empty", Value: []byte{}}}},
		{Key: nil, Value: nil},
		{Key: []byte{}, Value: []byte{}},
	}}
}

func TestRoundTrip(t *testing.T) {
	b := sample()
	enc := Append(nil, b)
	if len(enc) > Size(b) {
		t.Fatalf("Size %d < encoded %d", Size(b), len(enc))
	}
	got, err := Decode(enc, roomy)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, b)
	}
	if got.Records[1].Key != nil || got.Records[2].Key == nil {
		t.Fatal("null and empty keys must stay apart")
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := Append(nil, sample())
	cases := map[string]struct {
		body []byte
		want string
	}{
		"empty":          {nil, "must start with FGB"},
		"json":           {[]byte(`{"owner_id":"a"}`), "must start with FGB"},
		"version 3":      {append([]byte("FGB\x03"), good[4:]...), "must start with FGB"},
		"v2 without one": {append([]byte("FGB\x02"), good[4:]...), "checkpoint: truncated"},
		"v2 trailing":    {append(Append(nil, withCheckpoint([]byte("c"))), 0), "after the last record or checkpoint"},
		"v2 huge":        {append(append([]byte("FGB\x02"), good[4:]...), 0xff, 0xff, 0xff, 0x0f), "checkpoint of"},
		"v2 short":       {append(append([]byte("FGB\x02"), good[4:]...), 5, 'a'), "checkpoint: 4 bytes declared"},
		"trailing":       {append(append([]byte{}, good...), 0), "after the last record"},
		"zero token":     {Append(nil, Batch{OwnerID: "o", Token: 0, BatchID: "b"}), "token must be a positive"},
		"bad owner utf8": {Append(nil, Batch{OwnerID: "\xff", Token: 1, BatchID: "b"}), "owner_id is not valid UTF-8"},
		"huge count":     {append([]byte("FGB\x01\x01o\x01\x01b"), 0xff, 0xff, 0xff, 0xff, 0x0f), "record count"},
		"huge key":       {append([]byte("FGB\x01\x01o\x01\x01b\x01"), 0xff, 0xff, 0xff, 0x0f, 0, 0), "records[0]: key"},
		"overlong":       {append([]byte("FGB\x01\x01o"), bytes.Repeat([]byte{0xff}, 11)...), "token: truncated or overlong"},
		// Found by FuzzDecode (testdata/fuzz/FuzzDecode/2763e8ec405a39b3):
		// a count of 0 as two bytes decoded, and re-encoded as one.
		"not minimal": {[]byte("FGB\x01\x000\x00\x80\x00"), "record count: not the shortest varint"},
	}
	for i := 1; i < len(good); i++ {
		cases["truncated at "+string(rune('0'+i%10))+strings.Repeat("'", i/10)] = struct {
			body []byte
			want string
		}{good[:i], ""}
	}
	for name, c := range cases {
		_, err := Decode(c.body, roomy)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
}

// roomy are limits no test body reaches.
var roomy = Limits{Records: 1000, Headers: 1000, HeaderBytes: 1 << 20, Checkpoint: 1 << 20}

func withCheckpoint(c []byte) Batch {
	b := sample()
	b.Checkpoint = c
	return b
}

func TestCheckpointRoundTrip(t *testing.T) {
	for name, c := range map[string][]byte{"bytes": []byte("offset=17\x00"), "empty": {}} {
		b := withCheckpoint(c)
		enc := Append(nil, b)
		if string(enc[:4]) != "FGB\x02" {
			t.Fatalf("%s: a batch with a checkpoint must be version 2, starts %q", name, enc[:4])
		}
		if len(enc) > Size(b) {
			t.Fatalf("%s: Size %d < encoded %d", name, Size(b), len(enc))
		}
		got, err := Decode(enc, roomy)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, b) || got.Checkpoint == nil {
			t.Fatalf("%s: round trip:\n got %#v\nwant %#v", name, got, b)
		}
	}
}

// TestNoCheckpointIsVersion1: a batch without a checkpoint encodes as
// version 1 (a gateway knowing only version 1 takes it), and a version 2
// body saying none decodes to the same batch.
func TestNoCheckpointIsVersion1(t *testing.T) {
	v1 := Append(nil, sample())
	if string(v1[:4]) != "FGB\x01" {
		t.Fatalf("no checkpoint: starts %q, want version 1", v1[:4])
	}
	v2 := append(append([]byte("FGB\x02"), v1[4:]...), 0)
	got, err := Decode(v2, roomy)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Fatalf("version 2 without a checkpoint: got %#v", got)
	}
}

func TestDecodeLimits(t *testing.T) {
	body := Append(nil, sample())
	for name, lim := range map[string]Limits{
		"records":      {Records: 2, Headers: 100, HeaderBytes: 1 << 20},
		"headers":      {Records: 10, Headers: 0, HeaderBytes: 1 << 20},
		"header bytes": {Records: 10, Headers: 100, HeaderBytes: 1},
	} {
		if _, err := Decode(body, lim); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: %v, want ErrTooLarge", name, err)
		}
	}
	lim := roomy
	lim.Checkpoint = 4
	if _, err := Decode(Append(nil, withCheckpoint([]byte("abcd"))), lim); err != nil {
		t.Fatalf("checkpoint at the limit: %v", err)
	}
	if _, err := Decode(Append(nil, withCheckpoint([]byte("abcde"))), lim); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("checkpoint over the limit: %v, want ErrTooLarge", err)
	}
	// A header count over the limit is refused before the headers are
	// read: the count says 60,000, the body holds none of them.
	b := Append(nil, Batch{OwnerID: "o", Token: 1, BatchID: "b", Records: []Record{{}}})
	b = append(b[:len(b)-1], 0xe0, 0xd4, 0x03) // varint 60,000
	b = append(b, make([]byte, 2*60000)...)
	if _, err := Decode(b, roomy); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("60,000 headers: %v, want ErrTooLarge", err)
	}
}

// FuzzDecode: any body either fails or decodes to a batch that encodes
// back to the same bytes (the encoding is canonical), but for a version 2
// body saying no checkpoint, which encodes back as version 1.
func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, sample()))
	f.Add(Append(nil, withCheckpoint([]byte("cp"))))
	f.Add([]byte("FGB\x01"))
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := Decode(body, roomy)
		if err != nil {
			return
		}
		want := body
		if body[3] == 2 && b.Checkpoint == nil {
			want = append([]byte("FGB\x01"), body[4:len(body)-1]...)
		}
		if again := Append(nil, b); !bytes.Equal(again, want) {
			t.Fatalf("decoded %#v re-encodes to %x, not %x", b, again, body)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	batch := Batch{OwnerID: "worker-1", Token: 42, BatchID: "b-7", Records: make([]Record, 100)}
	for i := range batch.Records {
		batch.Records[i] = Record{Key: []byte("key-0001"), Value: bytes.Repeat([]byte{'v'}, 1024),
			Headers: []Header{{Name: "app", Value: []byte("bench")}}}
	}
	body := Append(nil, batch)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(body, roomy); err != nil {
			b.Fatal(err)
		}
	}
}
