package runner

import (
	"bytes"
	"testing"

	"github.com/toolgate/toolgate/internal/protocol"
)

func TestHeadTail(t *testing.T) {
	for _, tc := range []struct {
		name       string
		out        string
		max        int
		head, tail string
		omitted    int
	}{
		{name: "fits", out: "hello", max: 5, head: "hello"},
		{name: "empty", out: "", max: 0, head: ""},
		{name: "cut in the middle", out: "0123456789", max: 4, head: "01", tail: "89", omitted: 6},
		{name: "odd max gives the tail the extra byte", out: "0123456789", max: 5, head: "01", tail: "789", omitted: 5},
		// "é" is two bytes: neither part may split it.
		{name: "utf8 boundaries", out: "aéé€b", max: 4, head: "a", tail: "b", omitted: 7},
		{name: "zero max", out: "abc", max: 0, head: "", tail: "", omitted: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head, tail, omitted := HeadTail([]byte(tc.out), tc.max)
			if string(head) != tc.head || string(tail) != tc.tail || omitted != tc.omitted {
				t.Fatalf("got %q, %q, %d; want %q, %q, %d", head, tail, omitted, tc.head, tc.tail, tc.omitted)
			}
			if len(head)+len(tail) > tc.max {
				t.Errorf("kept %d bytes, more than %d", len(head)+len(tail), tc.max)
			}
			if len(head)+omitted+len(tail) != len(tc.out) {
				t.Errorf("parts do not add up to the output")
			}
		})
	}
}

func TestOutputCountsHashesAndCopiesEveryByte(t *testing.T) {
	var log bytes.Buffer
	o := newOutput(&log)
	_, _ = o.stdoutWriter().Write([]byte("out"))
	_, _ = o.stderrWriter().Write([]byte("err!"))
	var r protocol.Result
	o.fill(&r, 5)
	if log.String() != "outerr!" || r.StdoutBytes != 3 || r.StderrBytes != 4 || !r.Truncated {
		t.Fatalf("log %q, result %+v", log.String(), r)
	}
	if r.OutputSHA256 != sha256Hex([]byte("outerr!")) {
		t.Errorf("hash %s", r.OutputSHA256)
	}
}
