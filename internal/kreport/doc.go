// Package kreport reads a Linux kernel's fault report out of the text of
// a guest's serial console: an Oops, a BUG, a WARN, a general protection
// fault, a panic, a soft or hard lockup, a hung task, a KASAN or UBSAN
// report. A guest whose kernel crashed dies (vmm.FailFastCmdline makes
// every such fault a panic, and the panic ends the machine); the backend
// hands the console's last lines with the death (vmm.GuestDiedError), and
// Parse turns them into a Report: its kind, its first line, the RIP with
// symbol and offset, the call trace's functions and the panic's message.
//
// The console is the guest's, so untrusted: Parse reads at most MaxInput
// bytes (the last), keeps lines of at most MaxLine bytes, valid UTF-8
// without control characters, at most MaxTrace trace lines and a report
// text of at most MaxTextLines lines and MaxText bytes. It recognizes the
// shapes Linux 6.1 prints (kernel/panic.c, arch/x86/kernel/dumpstack.c,
// kernel/watchdog.c, kernel/hung_task.c, mm/kasan/report.c, lib/ubsan.c),
// with or without printk's "[    1.234567] " time prefix.
//
// The package is pure: no I/O, no clock.
package kreport
