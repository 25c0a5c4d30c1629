package kvm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

func TestStream(t *testing.T) {
	var fed bytes.Buffer
	s := newStream(func(p []byte) error { fed.Write(p); return nil }, nil)

	if _, err := s.Write([]byte("req")); err != nil || fed.String() != "req" {
		t.Fatalf("Write: %v, fed %q", err, fed.String())
	}
	if _, err := s.guestWrite([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 3)
	if n, err := s.Read(p); err != nil || string(p[:n]) != "hel" {
		t.Fatalf("Read = %q, %v", p[:n], err)
	}
	if n, err := s.Read(p); err != nil || string(p[:n]) != "lo" {
		t.Fatalf("Read = %q, %v", p[:n], err)
	}

	// A blocked Read wakes at its deadline, and a later guest write is read.
	if err := s.SetDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(p); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past deadline: %v", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past deadline: %v", err)
	}
	if err := s.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() {
		b := make([]byte, 8)
		n, _ := s.Read(b)
		done <- string(b[:n])
	}()
	time.Sleep(10 * time.Millisecond)
	if _, err := s.guestWrite([]byte("late")); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != "late" {
		t.Fatalf("blocked Read got %q", got)
	}

	// reset drops unread bytes; close drains and then fails.
	if _, err := s.guestWrite([]byte("stale")); err != nil {
		t.Fatal(err)
	}
	s.reset()
	if _, err := s.guestWrite([]byte("z")); err != nil {
		t.Fatal(err)
	}
	s.closeWith(io.ErrUnexpectedEOF)
	if n, err := s.Read(p); err != nil || string(p[:n]) != "z" {
		t.Fatalf("Read after close = %q, %v", p[:n], err)
	}
	if _, err := s.Read(p); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("drained Read after close: %v", err)
	}
	if _, err := s.Write(p); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Write after close: %v", err)
	}
	if _, err := s.guestWrite(p); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("guestWrite after close: %v", err)
	}
}

func TestStreamFull(t *testing.T) {
	s := newStream(func([]byte) error { return nil }, nil)
	if _, err := s.guestWrite(make([]byte, maxStreamBuffer)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.guestWrite([]byte{1}); !errors.Is(err, errStreamFull) {
		t.Fatalf("guestWrite beyond the bound: %v", err)
	}
}

// TestStreamWritePaced: a full receive queue makes Write wait and retry,
// in chunks, until the deadline.
func TestStreamWritePaced(t *testing.T) {
	errFull := errors.New("full")
	var fed bytes.Buffer
	calls := 0
	s := newStream(func(p []byte) error {
		calls++
		if calls%2 == 1 {
			return errFull
		}
		fed.Write(p)
		return nil
	}, errFull)
	msg := bytes.Repeat([]byte("ab"), feedChunk) // two chunks
	if n, err := s.Write(msg); err != nil || n != len(msg) || !bytes.Equal(fed.Bytes(), msg) {
		t.Fatalf("Write = %d, %v; fed %d bytes", n, err, fed.Len())
	}
	stuck := newStream(func([]byte) error { return errFull }, errFull)
	if err := stuck.SetDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := stuck.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write into a queue that stays full: %v", err)
	}
	other := errors.New("boom")
	if _, err := newStream(func([]byte) error { return other }, errFull).Write([]byte("x")); !errors.Is(err, other) {
		t.Fatalf("Write with a failing feed: %v", err)
	}
}
