package gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"

	"github.com/portcullis-dev/portcullis/internal/secretbox"
)

// SecretsKeyFile is the secrets key's name in StoreConfig.DataDir: the
// one an SQLite gateway started without --secrets-key-file makes and
// uses.
const SecretsKeyFile = "secrets.key"

// openSecretsKey reads cfg's secrets key, or for an SQLite gateway
// without one, reads or makes the default in its data directory (nil for
// a Postgres gateway without one: providers then fail with
// FailedPrecondition naming the flag).
func openSecretsKey(cfg RunConfig, log *slog.Logger) (*secretbox.Key, error) {
	if cfg.SecretsKeyFile != "" {
		k, err := secretbox.Load(cfg.SecretsKeyFile)
		if err != nil {
			return nil, &SettingError{fmt.Errorf("--secrets-key-file: %w", err)}
		}
		log.Info("credential providers' secrets key", "file", cfg.SecretsKeyFile, "key_id", k.ID())
		return k, nil
	}
	if cfg.Store.DatabaseURL != "" {
		log.Info("no --secrets-key-file: credential providers cannot be created or sent to proxies until every replica is started with the same one")
		return nil, nil
	}
	path := filepath.Join(cfg.Store.DataDir, SecretsKeyFile)
	k, err := secretbox.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		k, err = secretbox.Generate(path)
	}
	if err != nil {
		return nil, &SettingError{fmt.Errorf("secrets key (give one with --secrets-key-file): %w", err)}
	}
	log.Info("credential providers' secrets key: keep this file beside your backups, never in them (a backup without it cannot open the providers' secrets; with it, anyone can)",
		"file", path, "key_id", k.ID())
	return k, nil
}
