package client

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
)

func TestDrain(t *testing.T) {
	t.Parallel()
	errRecv, errEach := errors.New("recv failed"), errors.New("each failed")
	tests := []struct {
		name    string
		msgs    []int
		end     error // what recv returns after msgs
		failAt  int   // each fails on this message (0: never)
		want    []int
		wantErr error
	}{
		{name: "empty", end: io.EOF},
		{name: "all", msgs: []int{1, 2, 3}, end: io.EOF, want: []int{1, 2, 3}},
		{name: "wrapped EOF", msgs: []int{1}, end: fmt.Errorf("stream: %w", io.EOF), want: []int{1}},
		{name: "recv error", msgs: []int{1, 2}, end: errRecv, want: []int{1, 2}, wantErr: errRecv},
		{name: "each error stops", msgs: []int{1, 2, 3}, end: io.EOF, failAt: 2, want: []int{1, 2}, wantErr: errEach},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			i := 0
			recv := func() (int, error) {
				if i == len(tt.msgs) {
					return 0, tt.end
				}
				i++
				return tt.msgs[i-1], nil
			}
			var got []int
			err := Drain(recv, func(m int) error {
				got = append(got, m)
				if m == tt.failAt {
					return errEach
				}
				return nil
			})
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("Drain: error %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Drain: each saw %v, want %v", got, tt.want)
			}
		})
	}
}
