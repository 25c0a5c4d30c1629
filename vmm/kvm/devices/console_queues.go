package devices

import (
	"encoding/binary"
	"fmt"
)

// The Console's four queues, served with its mutex held on the vCPU
// thread, and its state.

// deliverRX puts pending host bytes into the receive queue's buffers, in
// order, filling each chain before the next and completing a chain when
// the bytes run out (so one message of up to a buffer's size takes one
// chain). It then sets NO_NOTIFY on the queue while no bytes wait, so the
// guest does not exit to tell the device about every buffer it gives back.
func (c *Console) deliverRX() {
	if !c.vio.usable(consoleRXQ) {
		return
	}
	r, pending, ok := c.take(consoleRXQ)
	if !ok {
		return
	}
	done := 0
	for ; pending > 0 && c.rxLen() > 0 && c.rxOpen(); pending-- {
		head, ok := c.pop(r)
		if !ok {
			return
		}
		if len(c.rd) > 0 {
			c.fail() // a receive buffer the device may not write
			return
		}
		n := 0
		for _, s := range c.wr {
			n += copy(s.buf, c.rx[c.rxHead+n:])
		}
		c.rxHead += n
		c.compactRX()
		r.complete(head, uint32(n))
		c.stats.RXBytes += uint64(n)
		c.stats.RXChains++
		done++
	}
	if done > 0 && r.interruptible() {
		c.vio.isr |= isrQueue
	}
	r.setNoNotify(c.rxLen() == 0)
}

// deliverCtrl puts pending control messages into the control receive
// queue's buffers, one message per chain; a chain too short for its
// message gets what fits (as QEMU does). NO_NOTIFY is set while no message
// waits.
func (c *Console) deliverCtrl() {
	if !c.multiport() || !c.vio.usable(consoleCtrlRXQ) {
		return
	}
	r, pending, ok := c.take(consoleCtrlRXQ)
	if !ok {
		return
	}
	done := 0
	for ; pending > 0 && len(c.ctrl) > 0; pending-- {
		head, ok := c.pop(r)
		if !ok {
			return
		}
		if len(c.rd) > 0 {
			c.fail()
			return
		}
		msg, n := c.ctrl[0], 0
		for _, s := range c.wr {
			n += copy(s.buf, msg[n:])
		}
		c.ctrl = c.ctrl[1:]
		r.complete(head, uint32(n))
		done++
	}
	if len(c.ctrl) == 0 {
		c.ctrl = nil
	}
	if done > 0 && r.interruptible() {
		c.vio.isr |= isrQueue
	}
	r.setNoNotify(len(c.ctrl) == 0)
}

// transmit sends every chain the guest made available on the transmit
// queue to out, in order, and completes it (nothing written back).
func (c *Console) transmit() {
	if !c.vio.usable(consoleTXQ) {
		return
	}
	r, pending, ok := c.take(consoleTXQ)
	if !ok {
		return
	}
	done := 0
	for ; pending > 0; pending-- {
		head, ok := c.pop(r)
		if !ok {
			return
		}
		if len(c.wr) > 0 || total(c.rd) > ConsoleMaxChain {
			c.fail() // a transmit chain is driver-readable only, and bounded
			return
		}
		for _, s := range c.rd {
			if len(s.buf) == 0 {
				continue
			}
			if n, err := c.out.Write(s.buf); err != nil || n != len(s.buf) {
				c.stats.Dropped += uint64(len(s.buf))
			} else {
				c.stats.TXBytes += uint64(n)
			}
		}
		r.complete(head, 0)
		c.stats.TXChains++
		done++
	}
	if done > 0 && r.interruptible() {
		c.vio.isr |= isrQueue
	}
}

// control serves the control messages the driver sent, then delivers
// whatever they made ready (the answers, and host bytes once the port is
// open).
func (c *Console) control() {
	if !c.multiport() || !c.vio.usable(consoleCtrlTXQ) {
		return
	}
	r, pending, ok := c.take(consoleCtrlTXQ)
	if !ok {
		return
	}
	done := 0
	for ; pending > 0; pending-- {
		head, ok := c.pop(r)
		if !ok {
			return
		}
		if len(c.wr) > 0 {
			c.fail()
			return
		}
		var hdr [ctrlHeaderSize]byte
		if gather(hdr[:], c.rd) < ctrlHeaderSize {
			c.stats.Errors++ // too short to be a message: completed, ignored
		} else {
			c.handleControl(binary.LittleEndian.Uint32(hdr[0:]), binary.LittleEndian.Uint16(hdr[4:]), binary.LittleEndian.Uint16(hdr[6:]))
		}
		r.complete(head, 0)
		done++
	}
	if done > 0 && r.interruptible() {
		c.vio.isr |= isrQueue
	}
	c.deliverCtrl()
	c.deliverRX()
}

// handleControl runs one control message from the driver. The handshake
// (QEMU's virtio-serial-bus, which Linux's virtio_console expects):
// DEVICE_READY is answered with PORT_ADD for the port; the port's
// PORT_READY with PORT_NAME and PORT_OPEN (the host side is always
// connected); the driver's PORT_OPEN says whether a guest program has the
// port open. The port is not a console port (no CONSOLE_PORT): the guest
// sees /dev/vportNp0, not an hvc.
func (c *Console) handleControl(id uint32, event, value uint16) {
	c.stats.Control++
	switch {
	case event == ctrlDeviceReady:
		c.deviceReady = value == 1
		if c.deviceReady {
			c.queueControl(ctrlMsg(consolePort, ctrlPortAdd, 1, ""))
		}
	case id != consolePort:
		c.stats.Errors++
	case event == ctrlPortReady:
		c.portReady = value == 1
		if c.portReady {
			c.queueControl(ctrlMsg(consolePort, ctrlPortName, 1, c.name))
			c.queueControl(ctrlMsg(consolePort, ctrlPortOpen, 1, ""))
		}
	case event == ctrlPortOpen:
		c.guestOpen = value != 0
	default:
		c.stats.Errors++ // not an event a driver sends
	}
}

// queueControl adds a message for the driver, or drops it (counted) when
// ConsoleControlLimit are waiting.
func (c *Console) queueControl(msg []byte) {
	if len(c.ctrl) >= ConsoleControlLimit {
		c.stats.Errors++
		return
	}
	c.ctrl = append(c.ctrl, msg)
}

// ctrlMsg encodes a control message; a name goes after the header with a
// NUL, as QEMU sends it.
func ctrlMsg(id uint32, event, value uint16, name string) []byte {
	b := make([]byte, ctrlHeaderSize, ctrlHeaderSize+len(name)+1)
	binary.LittleEndian.PutUint32(b[0:], id)
	binary.LittleEndian.PutUint16(b[4:], event)
	binary.LittleEndian.PutUint16(b[6:], value)
	if name != "" {
		b = append(append(b, name...), 0)
	}
	return b
}

// State returns the device's registers, queue cursors, port state and
// pending messages and bytes (copied).
func (c *Console) State() ConsoleState {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := ConsoleState{
		HostFeatures:  ConsoleFeatures,
		GuestFeatures: c.vio.guestFeatures,
		QueueSelect:   c.vio.queueSel,
		Status:        c.vio.status,
		ISR:           c.vio.isr,
		Queues:        c.vio.queueStates(),
		Name:          c.name,
		DeviceReady:   c.deviceReady,
		PortReady:     c.portReady,
		GuestOpen:     c.guestOpen,
		RX:            append([]byte(nil), c.rx[c.rxHead:]...),
	}
	for _, m := range c.ctrl {
		s.Control = append(s.Control, append([]byte(nil), m...))
	}
	return s
}

// SetState replaces the device's state with s (which it copies) and drives
// the interrupt line to the level s implies, whatever it was. Guest RAM is
// the caller's to restore with it. Counters are not state.
func (c *Console) SetState(s ConsoleState) error {
	if err := c.checkState(s); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.vio.setQueues(s.Queues); err != nil {
		return err
	}
	c.vio.guestFeatures, c.vio.queueSel, c.vio.status, c.vio.isr = s.GuestFeatures, s.QueueSelect, s.Status, s.ISR
	c.deviceReady, c.portReady, c.guestOpen = s.DeviceReady, s.PortReady, s.GuestOpen
	c.ctrl = nil
	for _, m := range s.Control {
		c.ctrl = append(c.ctrl, append([]byte(nil), m...))
	}
	c.rx, c.rxHead = append(c.rx[:0], s.RX...), 0
	return c.vio.forceIRQ()
}

// checkState refuses a state this device cannot take.
func (c *Console) checkState(s ConsoleState) error {
	switch {
	case s.HostFeatures != ConsoleFeatures || s.Name != c.name:
		return fmt.Errorf("devices: console set state: features %#x, port %q (want %#x, %q): %w", s.HostFeatures, s.Name, ConsoleFeatures, c.name, ErrBadState)
	case s.GuestFeatures&^ConsoleFeatures != 0 || s.ISR&^(isrQueue|isrConfig) != 0:
		return fmt.Errorf("devices: console set state: guest features %#x, ISR %#x: %w", s.GuestFeatures, s.ISR, ErrBadState)
	case len(s.RX) > ConsoleRXLimit || len(s.Control) > ConsoleControlLimit:
		return fmt.Errorf("devices: console set state: %d receive bytes, %d control messages: %w", len(s.RX), len(s.Control), ErrBadState)
	}
	for i, m := range s.Control {
		if len(m) < ctrlHeaderSize || len(m) > ctrlMsgMax {
			return fmt.Errorf("devices: console set state: control message %d of %d bytes: %w", i, len(m), ErrBadState)
		}
	}
	return nil
}
