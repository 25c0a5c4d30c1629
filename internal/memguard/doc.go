// Package memguard turns a fault on a memory access — SIGBUS on a page of a
// file mapping the file system cannot back (a full tmpfs, a file truncated
// under the mapping), SIGSEGV past a mapping — into an error for the caller
// instead of a crash of the whole process.
//
// Go's runtime crashes the process on such a fault unless the faulting
// goroutine has runtime/debug.SetPanicOnFault set; then it panics with a
// runtime.Error that has an Addr method, which Run recovers. The setting
// is per goroutine and not inherited: code that splits its work over
// goroutines calls Run in each of them. Run restores the goroutine's
// previous setting, so calls nest.
//
// Only faults at an address are recovered: a nil dereference (a bug, not a
// lost page) and any other panic go on as they would without Run.
//
// The package does no I/O and imports nothing of Themis; its callers are
// the readers and writers of guest RAM mappings (vmm/qemu, fork).
package memguard
