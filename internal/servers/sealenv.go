package servers

import (
	"encoding/json"
	"fmt"
	"maps"
)

// sealedPrefix marks a sealed value in the stored env. '\x00' cannot be
// in a value a user gives (env values are validated text), so a stored
// value with it was sealed by Kiln.
const sealedPrefix = "\x00sealed:"

// storedEnv is env as the servers table keeps it: JSON with the values of
// the software's secret variables (RCON_PASSWORD) sealed by
// Options.Secrets, so neither the database nor its backups hold them in
// the clear. scan opens them again. Sealing is randomised, so the stored
// text of one env differs between writes: SetEnv compares against the
// text it read (Server.envStored), never a re-marshalled map.
func (s *Service) storedEnv(software string, env map[string]string) (string, error) {
	out := maps.Clone(env)
	if p, ok := s.catalog.Get(software); ok {
		for k, v := range env {
			if !p.SecretVar(k) || v == "" {
				continue
			}
			if s.opts.Secrets == nil {
				return "", fmt.Errorf("env.%s is a secret and this process has no key to seal it with", k)
			}
			sealed, err := s.opts.Secrets.Seal([]byte(v))
			if err != nil {
				return "", fmt.Errorf("seal env.%s: %w", k, err)
			}
			out[k] = sealedPrefix + sealed
		}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("encode env: %w", err)
	}
	return string(data), nil
}
