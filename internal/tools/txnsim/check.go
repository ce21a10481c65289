package txnsim

import (
	"time"

	"meridian/internal/tools/check"
)

// TxnHistory converts the run's history to the checker's list-append form: each transaction
// reads its keys (the lists it observed), then appends its unique elements.
func (r *Result) TxnHistory() check.TxnHistory {
	h := check.TxnHistory{Txns: make([]check.Txn, 0, len(r.Stats.History))}
	for _, rec := range r.Stats.History {
		t := check.Txn{ID: rec.ID, Process: rec.Process, Invoke: int64(rec.Invoke), Return: int64(rec.Return)}
		switch rec.Outcome {
		case "ok":
			t.Outcome = check.TxnOK
		case "aborted":
			t.Outcome = check.TxnAborted
		default:
			t.Outcome = check.TxnIndeterminate
		}
		for _, k := range sortedKeys(rec.Reads) {
			t.Ops = append(t.Ops, check.Mop{Kind: check.MopRead, Key: k, List: rec.Reads[k]})
		}
		for _, a := range rec.Appends {
			t.Ops = append(t.Ops, check.Mop{Kind: check.MopAppend, Key: a.Key, Value: a.Value})
		}
		h.Txns = append(h.Txns, t)
	}
	return h
}

// CheckSerializable runs the serializability checker (Elle's method) on the run's history.
func (r *Result) CheckSerializable(timeout time.Duration) (check.Result, []check.Anomaly) {
	return check.CheckSerializable(r.TxnHistory(), timeout)
}
