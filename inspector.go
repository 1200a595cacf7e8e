package randflake

// Inspector reads Randflake IDs back: it decrypts them under the secret and
// splits the plaintext into timestamp, node ID and sequence. Every
// generator embeds one; NewInspector makes one for code that only reads
// IDs (the randflake command's inspect, an audit tool).
//
// The secret is not checked: an ID made under another secret decrypts to
// arbitrary fields. An Inspector is safe for concurrent use.
type Inspector struct {
	cipher *Sparx64
}

// NewInspector returns an Inspector for IDs made under secret (16 bytes).
func NewInspector(secret []byte) (Inspector, error) {
	c, err := newIDCipher(secret)
	if err != nil {
		return Inspector{}, err
	}
	return Inspector{cipher: c}, nil
}

// Inspect decrypts id and returns its Unix timestamp, node ID and sequence
// number. Every timestamp up to MaxTimestamp (2058) is read back; err is
// always nil (it is there for the reference's signature).
func (in Inspector) Inspect(id int64) (timestamp, nodeID, sequence int64, err error) {
	timestamp, nodeID, sequence = splitRaw(in.cipher.DecryptID(uint64(id)))
	return timestamp, nodeID, sequence, nil
}

// InspectString is Inspect for the string form of an ID. Malformed strings
// return ErrInvalidID.
func (in Inspector) InspectString(id string) (timestamp, nodeID, sequence int64, err error) {
	v, err := DecodeString(id)
	if err != nil {
		return 0, 0, 0, err
	}
	return in.Inspect(v)
}

// newIDCipher expands a generator's secret, which must be 16 bytes.
func newIDCipher(secret []byte) (*Sparx64, error) {
	if len(secret) != Sparx64KeySize {
		return nil, ErrInvalidSecret
	}
	return NewSparx64(secret)
}
