package engine

import (
	"slices"
	"testing"
)

func TestReconcileCreatesDropsAndOrders(t *testing.T) {
	instances := map[int]string{1: "one", 9: "nine"}
	var dropped []int
	local := []LocalPartition{{}, {}, {}}
	keys := []int{3, 1, 2}
	i := 0
	order := Reconcile(instances, local, func(LocalPartition) int { k := keys[i]; i++; return k },
		func(k int, _ LocalPartition) string { return "new" }, func(k int, _ string) { dropped = append(dropped, k) })
	if !slices.Equal(order, []int{3, 1, 2}) || !slices.Equal(dropped, []int{9}) {
		t.Fatalf("order %v dropped %v", order, dropped)
	}
	if instances[1] != "one" || instances[3] != "new" || instances[2] != "new" || len(instances) != 3 {
		t.Fatalf("instances %v", instances)
	}
}
