package protocol

// A call delivered to a session pod (isolation Session) follows this contract:
//
//   - The controller execs `PodRunnerPath ExecCommand` into the session pod's
//     container (pods/exec); the pod's PID 1 is `PodRunnerPath SessionCommand`.
//   - The Invocation is the first line of `runner exec`'s stdin (compact JSON, at
//     most the runner's MaxInvocationBytes); stdin stays open for the whole call,
//     and its end (the controller or its connection gone) stops the call as a
//     timeout does.
//   - stdout carries the call's output once the call ended: all of it when it is at
//     most MaxOutputBytes, else exactly its first head and last tail bytes
//     (OutputBudgets). stderr carries the Result as compact JSON, last. The exit
//     code is ProcessExitCode, as in a Job. Before the Result is written every
//     descendant of the runner is killed.
//   - A background job (Invocation.Background) is `runner exec` too, in a session
//     pod of its own (no other call ever runs beside it): its first line on stderr
//     is Started, written before the tool starts; its output goes to stdout as it
//     comes (the controller keeps head and tail with a Capture), and the Result
//     follows Started on stderr when the job ends.

// cutMarkerMax bounds the length of the marker the controller puts where output was
// cut, so that head, marker and tail together stay within maxOutputBytes.
const cutMarkerMax = 64

// OutputBudgets splits maxOutputBytes into the bytes kept from the head and from the
// tail of an output that does not fit, leaving room for the cut marker. The runner
// of a session call sends exactly these; the controller shows them.
func OutputBudgets(maxOutputBytes int32) (head, tail int) {
	room := max(int(maxOutputBytes)-cutMarkerMax, 2)
	head = room / 2
	return head, room - head
}

// Capture keeps what a session call sends of its output: the first maxOutputBytes
// bytes and the last tail budget bytes, whatever the output's length.
type Capture struct {
	max        int
	head       []byte
	tail       []byte // a ring of the last tailBudget bytes
	tailBudget int
	next       int // where the ring writes next, once full
	total      int64
}

// NewCapture returns a Capture for an invocation's maxOutputBytes.
func NewCapture(maxOutputBytes int32) *Capture {
	_, tail := OutputBudgets(maxOutputBytes)
	return &Capture{max: max(int(maxOutputBytes), 0), tailBudget: tail}
}

// Write keeps p's bytes in the head and the ring; it never fails.
func (c *Capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if room := c.max - len(c.head); room > 0 {
		c.head = append(c.head, p[:min(room, len(p))]...)
	}
	q := p
	if len(q) > c.tailBudget {
		q = q[len(q)-c.tailBudget:]
	}
	for len(q) > 0 {
		if len(c.tail) < c.tailBudget {
			n := min(c.tailBudget-len(c.tail), len(q))
			c.tail = append(c.tail, q[:n]...)
			q = q[n:]
			continue
		}
		n := copy(c.tail[c.next:], q)
		c.next = (c.next + n) % c.tailBudget
		q = q[n:]
	}
	return len(p), nil
}

// Total is how many bytes were written.
func (c *Capture) Total() int64 { return c.total }

// Bytes is what the runner sends: the whole output when it fits in maxOutputBytes,
// else its first head budget bytes followed by its last tail budget bytes.
func (c *Capture) Bytes(maxOutputBytes int32) []byte {
	if c.total <= int64(c.max) {
		return c.head
	}
	headBudget, _ := OutputBudgets(maxOutputBytes)
	out := append([]byte(nil), c.head[:min(headBudget, len(c.head))]...)
	out = append(out, c.tail[c.next:]...)
	return append(out, c.tail[:c.next]...)
}

// Started is the first line `runner exec` writes on stderr for a background job,
// before the job's tool starts.
type Started struct {
	Started bool `json:"started"`
}
