package gameserver

import (
	"fmt"
	"slices"
	"testing"
)

func TestConsoleRing(t *testing.T) {
	c := newConsole()
	if got := c.tail(10); len(got) != 0 {
		t.Fatalf("empty tail = %q", got)
	}
	for i := range 5 {
		c.add(fmt.Sprint(i))
	}
	if got := c.tail(3); !slices.Equal(got, []string{"2", "3", "4"}) {
		t.Errorf("tail(3) = %q", got)
	}
	if got := c.tail(100); len(got) != 5 || got[0] != "0" {
		t.Errorf("tail(100) = %q", got)
	}
	for i := 5; i < consoleLines+7; i++ {
		c.add(fmt.Sprint(i))
	}
	got := c.tail(consoleLines + 50)
	if len(got) != consoleLines || got[0] != "7" || got[len(got)-1] != fmt.Sprint(consoleLines+6) {
		t.Errorf("after wrap: len %d first %q last %q", len(got), got[0], got[len(got)-1])
	}
}

func TestConsoleSlowSubscriberIsDropped(t *testing.T) {
	c := newConsole()
	fast, stopFast, _ := c.subscribe()
	slow, _, _ := c.subscribe()
	defer stopFast()
	drain := func(ch <-chan Event, want int) int {
		n := 0
		for n < want {
			if _, ok := <-ch; !ok {
				break
			}
			n++
		}
		return n
	}
	for i := range 400 {
		c.add(fmt.Sprint(i))
	}
	got := drain(fast, 400)
	for i := range 200 {
		c.add(fmt.Sprint(i))
	}
	got += drain(fast, 200)
	if got != 600 {
		t.Errorf("fast subscriber got %d events, want 600", got)
	}
	n := 0
	for range slow {
		n++
	}
	if n != 512 {
		t.Errorf("slow subscriber got %d events before being dropped, want 512", n)
	}
}

// TestConsoleStreamCap: MaxStreams subscribers at most; one that ends
// makes room for another.
func TestConsoleStreamCap(t *testing.T) {
	c := newConsole()
	stops := make([]func(), MaxStreams)
	for i := range stops {
		_, stop, err := c.subscribe()
		if err != nil {
			t.Fatalf("subscribe #%d: %v", i+1, err)
		}
		stops[i] = stop
	}
	if _, _, err := c.subscribe(); err != ErrTooManyStreams {
		t.Fatalf("subscribe #%d = %v, want ErrTooManyStreams", MaxStreams+1, err)
	}
	stops[0]()
	stops[0]() // twice is harmless and frees nothing more
	_, stop, err := c.subscribe()
	if err != nil {
		t.Fatalf("subscribe after one ended = %v", err)
	}
	stop()
	c.end("deleted") // ends the others: room for all again
	for range MaxStreams {
		if _, _, err := c.subscribe(); err != nil {
			t.Fatalf("subscribe after end = %v", err)
		}
	}
}
