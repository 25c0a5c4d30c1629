// Package devices holds the pure-Go device models of the Go VMM on /dev/kvm
// (package kvm): no ioctls, no cgo, no unsafe. They serve port I/O exits and
// DMA into guest RAM through small interfaces (PortDevice, IRQ, Memory), so
// they are tested here without a VM.
//
// The devices:
//
//   - UART: a 16550A (FIFO, scratch register, divisor latch, loopback) whose
//     transmitter is instant. Linux's 8250 autoconfig identifies it as a
//     16550A and its THRE test passes, so the driver runs interrupt-driven.
//     Guest output goes to an io.Writer; host input is queued with Feed.
//   - RTC: a minimal MC146818 CMOS clock on 0x70/0x71 (host UTC time in
//     BCD, update-in-progress clear, CMOS RAM, no interrupts).
//   - PCIBus: bus 0 behind configuration mechanism #1 (ports 0xcf8-0xcff)
//     with an i440FX host bridge in slot 0. Each device has one I/O BAR0;
//     the guest may size and move it, and Route finds the device behind a
//     port.
//   - Block: a legacy (virtio 0.9.5) virtio-pci block device with one
//     256-entry split virtqueue, offering SEG_MAX, BLK_SIZE and FLUSH, and
//     answering GET_ID with its serial (Linux: /sys/block/vdX/serial, which
//     is how the guest agent finds its disks).
//   - Console: a legacy virtio-pci console (virtio-serial) with
//     VIRTIO_CONSOLE_F_MULTIPORT and one port whose name the guest reads in
//     /sys/class/virtio-ports/vportNp0/name; four 128-entry queues (port 0
//     receive and transmit, control receive and transmit). It answers
//     Linux's control handshake as QEMU's virtio-serial does: DEVICE_READY
//     with PORT_ADD, PORT_READY with PORT_NAME and PORT_OPEN (the host end
//     is always connected); the driver's PORT_OPEN says whether a guest
//     program has the port open. It is the agent channel with one exit per
//     message each way instead of one per byte: the guest's transmitted
//     buffer is read in its notify exit; host bytes (Feed) raise the queue
//     interrupt and go into the guest's receive buffers when it reads the
//     ISR; the receive queues carry VRING_USED_F_NO_NOTIFY while nothing
//     waits, so giving buffers back costs no exit.
//
// The virtio devices share the legacy transport (virtio.go): the common
// registers, feature negotiation, status, ISR and line, queue select and
// notify, the split ring layout for any queue size, and the chain walk.
//
// Machine conventions: COM1 (console, ttyS0) at 0x3f8 on IRQ 4; COM2 (agent
// channel fallback, ttyS1) at 0x2f8 on IRQ 3; PCI devices from slot 1, BAR0
// at 0xc000 + 0x100*slot, the interrupt line register preset to the
// device's PIC line, pin INTA (the VMM puts the disks first, then the
// console on IRQ 6). Lines are the legacy 8259 PIC's, driven with
// KVM_IRQ_LINE. Devices drive their line like a level-triggered source and
// drop it whenever nothing is pending, so with the PIC's default edge
// triggering every new event is a fresh rising edge.
//
// The guest kernel (Debian 6.1 cloud: CONFIG_SERIAL_8250=y,
// CONFIG_VIRTIO_PCI=m, CONFIG_VIRTIO_BLK=m, CONFIG_VIRTIO_CONSOLE=m, so the
// initramfs must load virtio_pci, virtio_blk and virtio_console) needs on
// its command line:
//
//	console=ttyS0 noapic acpi=off pci=conf1 virtio_pci.force_legacy=1
//
// noapic and acpi=off keep interrupts on the PIC and take PCI interrupt
// routing from the interrupt line register; pci=conf1 makes Linux probe PCI
// through ports 0xcf8/0xcfc (no BIOS, no MMCONFIG); force_legacy makes
// virtio_pci use the legacy register block in BAR0 rather than look for
// virtio 1.0 capabilities, which these devices do not have.
//
// Dispatch is the VMM's: ports [0x3f8, 0x400) and [0x2f8, 0x300) to the
// UARTs, [0xcf8, 0xd00) to the PCIBus, then PCIBus.Route. Linux also probes
// ports no device here decodes (COM3/COM4 at 0x3e8/0x2e8, SuperIO at
// 0x2e/0x4e, the 0x80 delay port, ...); the VMM should answer those as an
// empty ISA bus (reads all ones, writes ignored), or the 8250 and PCI probes
// go wrong.
//
// Concurrency: every device has its own mutex. The vCPU thread calls In, Out
// and (through Route) the BAR handlers; host goroutines call Feed, Stats,
// State and SetState at any time. IRQ.SetLevel and the UART's writer are
// called with the device's mutex held, so they must not block or call back
// into the device. Block does its backend I/O synchronously on the vCPU
// thread, inside the notify write, also under its mutex; a host call waits
// for the batch in progress.
//
// The guest is untrusted: no guest input makes a device panic or touch
// memory outside what Memory.Slice returns. A virtqueue the device cannot
// process (a broken descriptor chain, no writable status byte, a ring
// outside RAM, an impossible available index) makes Block set NEEDS_RESET
// (0x40) in its status, raise a config interrupt and ignore the queue until
// the driver resets the device; a request it can complete but not serve
// gets VIRTIO_BLK_S_IOERR or VIRTIO_BLK_S_UNSUPP. Console does the same
// for a broken ring or chain, a buffer outside RAM, a writable buffer on a
// transmit queue or a readable one on a receive queue, and a transmit chain
// over ConsoleMaxChain bytes; a malformed control message is completed and
// ignored (counted); host bytes wait up to ConsoleRXLimit (Feed refuses
// more) and control messages up to ConsoleControlLimit (more are dropped).
// Chains are at most a queue long; queue sizes are the device's. Errors
// returned from In and Out are host failures (SetLevel) or accesses a
// device does not decode.
//
// Checkpoints: UART, PCIBus, Block and Console have State and SetState with
// exported state structs holding every register and cursor (UART: pending
// receive bytes; Block: the last available index consumed and the used
// index; Console: every queue's cursors, the port's handshake and open
// state, the control messages and host bytes waiting).
// SetState drives the IRQ line to the restored level unconditionally.
// Guest RAM and disk contents are the caller's to restore with them;
// counters are not state.
//
// This package imports only the standard library; it must not import vmm or
// kvm (kvm imports it).
package devices
