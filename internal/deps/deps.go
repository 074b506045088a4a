//go:build tools

// Package deps pins the module's dependencies (the design card's plus the test-only
// engines) so that `go mod tidy` keeps them while packages that use them are written.
package deps

import (
	_ "github.com/IBM/sarama"
	_ "github.com/ThreeDotsLabs/watermill"
	_ "github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	_ "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/microsoft/go-mssqldb"
	_ "github.com/oklog/ulid/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/twmb/franz-go/pkg/kfake"
)
