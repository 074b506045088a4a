package dashboard

import "errors"

var (
	// ErrInvalidConfig wraps every validation error of Config; the message names the
	// field.
	ErrInvalidConfig = errors.New("dashboard: invalid config")

	// ErrNoStore is returned by New for a nil store.
	ErrNoStore = errors.New("dashboard: store is nil")
)
