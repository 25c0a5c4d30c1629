package qemu

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestChildOutlivesStarterThread starts a child as launch starts QEMU
// (Pdeathsig SIGKILL) from a goroutine that then ends locked to its OS
// thread, so that Go ends the thread, as a KVM vCPU goroutine's end does
// to whatever thread it ran on: the child must live on (Pdeathsig follows
// the forking thread, not the process). Before startHeld, the child was
// forked from the caller's thread and was SIGKILLed with it.
func TestChildOutlivesStarterThread(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	exited := make(chan error, 1)
	started := make(chan error, 1)
	go func() {
		// Holds its thread (which may be the main one, which Go never
		// ends), so that the goroutine below runs on another.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			started <- startHeld(cmd, func(err error) { exited <- err })
		}()
		<-done
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Fatalf("the child died when its starter's thread ended: %v", err)
	case <-time.After(time.Second):
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil {
		t.Error("the killed child exited 0")
	}
}
