package main

import "log/slog"

// Environment variables that shape every command's log.
const (
	envLogFormat = "PORTCULLIS_LOG_FORMAT"
	envLogLevel  = "PORTCULLIS_LOG_LEVEL"
)

// newLogger is a server's log (gateway, proxy): JSON to stderr (text with
// PORTCULLIS_LOG_FORMAT=text) at PORTCULLIS_LOG_LEVEL (debug, info — the
// default —, warn, error).
func newLogger(env *environment) (*slog.Logger, error) { return logger(env, slog.LevelInfo, "json") }

// newCommandLogger is the log of a command that runs once and says what it
// did (migrate, signing-key rotate): text beside its output, warnings and
// errors only unless PORTCULLIS_LOG_LEVEL or PORTCULLIS_LOG_FORMAT ask.
func newCommandLogger(env *environment) (*slog.Logger, error) {
	return logger(env, slog.LevelWarn, "text")
}

func logger(env *environment, level slog.Level, format string) (*slog.Logger, error) {
	if v := env.getenv(envLogLevel); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, usagef("%s: %v", envLogLevel, err)
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	if v := env.getenv(envLogFormat); v != "" {
		format = v
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(env.stderr, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(env.stderr, opts)), nil
}
