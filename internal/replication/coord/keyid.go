package coord

// KeyID identifies a key across keyspaces and partitions, as a map key: the keyspace, a zero
// byte, the partition as 4 bytes big-endian, then the key. (MeteorShower's status map uses
// the same layout.)
func KeyID(keyspace string, partition uint32, key []byte) string {
	b := make([]byte, 0, len(keyspace)+len(key)+5)
	b = append(b, keyspace...)
	b = append(b, 0, byte(partition>>24), byte(partition>>16), byte(partition>>8), byte(partition))
	b = append(b, key...)
	return string(b)
}

// ParseKeyID splits a key ID made by KeyID.
func ParseKeyID(id string) (ks string, part uint32, key []byte, ok bool) {
	i := 0
	for i < len(id) && id[i] != 0 {
		i++
	}
	if i+5 > len(id) {
		return "", 0, nil, false
	}
	b := id[i+1 : i+5]
	part = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return id[:i], part, []byte(id[i+5:]), true
}
