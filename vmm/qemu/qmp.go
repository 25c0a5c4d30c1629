package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"go.uber.org/zap"
)

// maxQMPLine bounds one QMP message; QEMU's replies to our commands are small.
const maxQMPLine = 4 << 20

// ErrQMPClosed is returned for commands on a closed or broken QMP connection.
var ErrQMPClosed = errors.New("qemu: qmp connection closed")

// QMPError is an error reply from QEMU.
type QMPError struct {
	Command string
	Class   string
	Desc    string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qemu: qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// Event is an asynchronous QMP event.
type Event struct {
	Name string          `json:"event"`
	Data json.RawMessage `json:"data"`
}

type qmpReply struct {
	ID     string          `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
	QMP   json.RawMessage `json:"QMP"`
}

// qmpClient is a small QMP client: commands carry ids, replies are matched by
// id, events fan out to subscribers. It is safe for concurrent use.
type qmpClient struct {
	conn net.Conn
	log  *zap.Logger

	wmu sync.Mutex // serializes writes

	mu      sync.Mutex
	nextID  uint64
	pending map[string]chan qmpReply
	subs    map[int]chan Event
	nextSub int
	err     error // set once the reader stops
	done    chan struct{}
}

// dialQMP wraps an accepted QMP connection: reads the greeting and negotiates capabilities.
func newQMP(ctx context.Context, conn net.Conn, log *zap.Logger) (*qmpClient, error) {
	c := &qmpClient{
		conn:    conn,
		log:     log,
		pending: make(map[string]chan qmpReply),
		subs:    make(map[int]chan Event),
		done:    make(chan struct{}),
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	// The greeting arrives before anything else.
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetReadDeadline(dl); err != nil {
			return nil, fmt.Errorf("qemu: qmp deadline: %w", err)
		}
	}
	line, err := readLine(r)
	if err != nil {
		return nil, fmt.Errorf("qemu: qmp greeting: %w", err)
	}
	var greet qmpReply
	if err := json.Unmarshal(line, &greet); err != nil || greet.QMP == nil {
		return nil, fmt.Errorf("qemu: qmp greeting %q: not a QMP greeting", truncate(line, 120))
	}
	if err := conn.SetReadDeadline(noDeadline); err != nil {
		return nil, fmt.Errorf("qemu: qmp deadline: %w", err)
	}
	go c.readLoop(r)
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		buf = append(buf, chunk...)
		if len(buf) > maxQMPLine {
			return nil, fmt.Errorf("qmp message longer than %d bytes", maxQMPLine)
		}
		if !isPrefix {
			return buf, nil
		}
	}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func (c *qmpClient) readLoop(r *bufio.Reader) {
	var err error
	for {
		var line []byte
		line, err = readLine(r)
		if err != nil {
			break
		}
		var msg qmpReply
		if jerr := json.Unmarshal(line, &msg); jerr != nil {
			c.log.Warn("qmp: undecodable message", zap.ByteString("line", line), zap.Error(jerr))
			continue
		}
		if msg.Event != "" {
			c.mu.Lock()
			for _, ch := range c.subs {
				select {
				case ch <- Event{Name: msg.Event, Data: msg.Data}:
				default: // a slow subscriber loses events rather than stalling QMP
				}
			}
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		ch, ok := c.pending[msg.ID]
		delete(c.pending, msg.ID)
		c.mu.Unlock()
		if ok {
			ch <- msg
		} else {
			c.log.Debug("qmp: reply without a waiter", zap.String("id", msg.ID))
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %w", ErrQMPClosed, err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

// Execute runs one command and decodes its return value into result (may be nil).
func (c *qmpClient) Execute(ctx context.Context, cmd string, args any, result any) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("qemu: qmp %s: %w", cmd, err)
	}
	c.nextID++
	id := strconv.FormatUint(c.nextID, 10)
	ch := make(chan qmpReply, 1)
	c.pending[id] = ch
	c.mu.Unlock()

	req := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		c.forget(id)
		return fmt.Errorf("qemu: qmp %s: encode: %w", cmd, err)
	}
	b = append(b, '\n')
	c.wmu.Lock()
	_, err = c.conn.Write(b)
	c.wmu.Unlock()
	if err != nil {
		c.forget(id)
		return fmt.Errorf("qemu: qmp %s: write: %w", cmd, err)
	}
	select {
	case <-ctx.Done():
		c.forget(id)
		return fmt.Errorf("qemu: qmp %s: %w", cmd, ctx.Err())
	case reply, ok := <-ch:
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return fmt.Errorf("qemu: qmp %s: %w", cmd, err)
		}
		if reply.Error != nil {
			return &QMPError{Command: cmd, Class: reply.Error.Class, Desc: reply.Error.Desc}
		}
		if result != nil && len(reply.Return) > 0 {
			if err := json.Unmarshal(reply.Return, result); err != nil {
				return fmt.Errorf("qemu: qmp %s: decode reply: %w", cmd, err)
			}
		}
		return nil
	}
}

func (c *qmpClient) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// Subscribe returns a channel of events and a function that ends the subscription.
func (c *qmpClient) Subscribe() (<-chan Event, func()) {
	ch := make(chan Event, 64)
	c.mu.Lock()
	id := c.nextSub
	c.nextSub++
	c.subs[id] = ch
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		delete(c.subs, id)
		c.mu.Unlock()
	}
}

// Done is closed when the connection ends.
func (c *qmpClient) Done() <-chan struct{} { return c.done }

// Close closes the connection; the read loop ends and pending commands fail.
func (c *qmpClient) Close() error {
	err := c.conn.Close()
	<-c.done
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("qemu: close qmp: %w", err)
	}
	return nil
}
