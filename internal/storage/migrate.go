package storage

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// migrateBatchKeys bounds one migration batch: each batch is atomic (new keys set, old keys
// deleted), so a crash in the middle leaves every version in exactly one of the two forms
// and the next Open continues where this one stopped.
const migrateBatchKeys = 4096

// migrateLegacyDataKeys rewrites every data key of the layout that named a partition ('d' |
// keyspace | partition | key | version) into the partition-free layout ('k' | keyspace | key
// | version), keeping the value bytes. The two layouts have different tags, so a partly
// migrated store is unambiguous and the migration is idempotent. It returns the number of
// versions rewritten. Run by Open before anything reads the store.
func migrateLegacyDataKeys(db *pebble.DB) (migrated int, err error) {
	lo := []byte{legacyDataKeyTag}
	hi := []byte{legacyDataKeyTag + 1}
	// Each pass handles up to migrateBatchKeys versions and deletes them, so the loop ends
	// after (versions / migrateBatchKeys) + 1 passes.
	for {
		n, err := migrateOneBatch(db, lo, hi)
		migrated += n
		if err != nil {
			return migrated, fmt.Errorf("storage: migrate data keys (after %d versions): %w", migrated, err)
		}
		if n < migrateBatchKeys {
			return migrated, nil
		}
	}
}

func migrateOneBatch(db *pebble.DB, lo, hi []byte) (n int, err error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	b := db.NewBatch()
	defer func() { err = errors.Join(err, b.Close()) }()
	var kbuf []byte
	for valid := it.First(); valid && n < migrateBatchKeys; valid = it.Next() {
		ks, key, v, derr := decodeLegacyDataKey(it.Key())
		if derr != nil {
			return n, errors.Join(derr, it.Close())
		}
		val, verr := it.ValueAndErr()
		if verr != nil {
			return n, errors.Join(verr, it.Close())
		}
		kbuf = encodeDataKey(kbuf[:0], ks, key, v)
		if err := b.Set(kbuf, val, nil); err != nil {
			return n, errors.Join(err, it.Close())
		}
		if err := b.Delete(it.Key(), nil); err != nil {
			return n, errors.Join(err, it.Close())
		}
		n++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return n, err
	}
	if n == 0 {
		return 0, nil
	}
	return n, b.Commit(pebble.Sync)
}
