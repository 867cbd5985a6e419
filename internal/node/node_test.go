package node

import (
	"path/filepath"
	"testing"
)

func TestOfferApply(t *testing.T) {
	machine := Capacity{MemoryBytes: 16 << 30, MemoryFreeBytes: 12 << 30, DiskBytes: 500 << 30, DiskFreeBytes: 200 << 30}
	for _, tc := range []struct {
		name  string
		offer Offer
		want  Capacity
	}{
		{"none: the machine's", Offer{}, machine},
		{"less memory: free at most it", Offer{MemoryBytes: 8 << 30}, Capacity{MemoryBytes: 8 << 30, MemoryFreeBytes: 8 << 30, DiskBytes: 500 << 30, DiskFreeBytes: 200 << 30}},
		{"more memory than the machine", Offer{MemoryBytes: 32 << 30}, Capacity{MemoryBytes: 32 << 30, MemoryFreeBytes: 12 << 30, DiskBytes: 500 << 30, DiskFreeBytes: 200 << 30}},
		{"less disk: free at most it", Offer{DiskBytes: 100 << 30}, Capacity{MemoryBytes: 16 << 30, MemoryFreeBytes: 12 << 30, DiskBytes: 100 << 30, DiskFreeBytes: 100 << 30}},
		{"both", Offer{MemoryBytes: 14 << 30, DiskBytes: 300 << 30}, Capacity{MemoryBytes: 14 << 30, MemoryFreeBytes: 12 << 30, DiskBytes: 300 << 30, DiskFreeBytes: 200 << 30}},
	} {
		if got := tc.offer.Apply(machine); got != tc.want {
			t.Errorf("%s: %+v.Apply = %+v, want %+v", tc.name, tc.offer, got, tc.want)
		}
	}
}

// TestLocalOffer: the local node's capacity is what it offers.
func TestLocalOffer(t *testing.T) {
	n, err := NewLocal("local", filepath.Join(t.TempDir(), "servers"), PortRange{First: 25565, Last: 25565}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.SetOffer(Offer{MemoryBytes: 3 << 30, DiskBytes: 5 << 30})
	c, err := n.Capacity(t.Context())
	if err != nil || c.MemoryBytes != 3<<30 || c.DiskBytes != 5<<30 || c.MemoryFreeBytes > 3<<30 || c.DiskFreeBytes > 5<<30 {
		t.Errorf("Capacity = %+v, %v; want 3 GiB of memory, 5 GiB of disk", c, err)
	}
}
