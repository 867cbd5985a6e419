package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the key's length in bytes.
const KeySize = 32

// KeyFile is the key's file in the data dir when the operator gives none.
const KeyFile = "secret.key"

const prefix = "v1:"

// ErrOpen: a sealed value that this key cannot open (another key, or
// damaged).
var ErrOpen = errors.New("secretbox: the value cannot be opened with this key")

// Box seals and opens with one key.
type Box struct {
	aead cipher.AEAD
	prk  []byte // HKDF-Extract of the key, for Derive
}

// LogValue keeps the key out of logs.
func (b *Box) LogValue() slog.Value { return slog.StringValue("[secretbox]") }

// New returns a Box on key (KeySize bytes).
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secretbox: the key must be %d bytes, not %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	prk, err := hkdf.Extract(sha256.New, key, []byte("kiln secretbox derive"))
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead, prk: prk}, nil
}

// Derive returns a 32-byte key for purpose (HKDF-SHA256 of the box's
// key): one secret, keys that cannot be turned into each other or into
// the sealing key, each for one use (a MAC must not share the sealing key).
func (b *Box) Derive(purpose string) []byte {
	k, err := hkdf.Expand(sha256.New, b.prk, purpose, KeySize)
	if err != nil {
		panic(fmt.Sprintf("secretbox: derive: %v", err)) // only for lengths over 255*32
	}
	return k
}

// Load returns the Box of the operator's key (base64 of KeySize bytes)
// when given, else of the key in dataDir/KeyFile, which it creates (0600)
// on first use.
func Load(dataDir, operatorKey string) (*Box, error) {
	if operatorKey != "" {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(operatorKey))
		if err != nil || len(key) != KeySize {
			return nil, fmt.Errorf("the secret key must be %d bytes in base64 (e.g. head -c %d /dev/urandom | base64)", KeySize, KeySize)
		}
		return New(key)
	}
	path := filepath.Join(dataDir, KeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, KeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return Load(dataDir, "") // made meanwhile: read it
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		_, err = f.Write(key)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		return New(key)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("%s holds %d bytes, not a %d-byte key", path, len(key), KeySize)
	}
	return New(key)
}

// Seal returns plaintext sealed.
func (b *Box) Seal(plaintext []byte) (string, error) {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := b.aead.Seal(nonce, nonce, plaintext, nil)
	return prefix + base64.StdEncoding.EncodeToString(out), nil
}

// Open returns what Seal sealed. Errors: ErrOpen.
func (b *Box) Open(sealed string) ([]byte, error) {
	raw, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, ErrOpen
	}
	data, err := base64.StdEncoding.DecodeString(raw)
	n := b.aead.NonceSize()
	if err != nil || len(data) < n+b.aead.Overhead() {
		return nil, ErrOpen
	}
	out, err := b.aead.Open(nil, data[:n], data[n:], nil)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}
