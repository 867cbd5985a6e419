package sftp

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// HostKeyFile is the host key's name in the data directory.
const HostKeyFile = "sftp_host_ed25519_key"

// loadHostKey reads the ed25519 host key of dataDir, creating it (0600,
// OpenSSH's private key format) on the first start. It is written to a
// temporary file then linked into place, so two processes starting at
// once agree on one key and a crash never leaves half a key.
func loadHostKey(dataDir string) (ssh.Signer, error) {
	p := filepath.Join(dataDir, HostKeyFile)
	for range 3 {
		b, err := os.ReadFile(p)
		if err == nil {
			s, err := ssh.ParsePrivateKey(b)
			if err != nil {
				return nil, fmt.Errorf("read the sftp host key %s: %w", p, err)
			}
			if s.PublicKey().Type() != ssh.KeyAlgoED25519 {
				return nil, fmt.Errorf("the sftp host key %s is %s, not ed25519", p, s.PublicKey().Type())
			}
			return s, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read the sftp host key: %w", err)
		}
		if err := createHostKey(dataDir, p); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("the sftp host key %s could not be created", p)
}

func createHostKey(dataDir, p string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create the data directory: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate the sftp host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "kiln sftp host key")
	if err != nil {
		return fmt.Errorf("encode the sftp host key: %w", err)
	}
	tmp, err := os.CreateTemp(dataDir, ".sftp-host-key-*")
	if err != nil {
		return fmt.Errorf("write the sftp host key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write the sftp host key: %w", err)
	}
	if _, err := tmp.Write(pem.EncodeToMemory(block)); err != nil {
		tmp.Close()
		return fmt.Errorf("write the sftp host key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write the sftp host key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write the sftp host key: %w", err)
	}
	// link(2) fails if the name exists: the first writer's key wins.
	if err := os.Link(tmp.Name(), p); err != nil {
		return fmt.Errorf("write the sftp host key: %w", err)
	}
	return nil
}
