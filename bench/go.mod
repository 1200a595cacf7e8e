module github.com/randflake/randflake/bench

go 1.23.0

require (
	github.com/bwmarrin/snowflake v0.3.0
	github.com/google/uuid v1.6.0
	github.com/klauspost/cpuid/v2 v2.3.0
	github.com/oklog/ulid/v2 v2.1.2
	github.com/randflake/randflake v0.2.0
	github.com/rs/xid v1.6.0
	github.com/segmentio/ksuid v1.0.4
	github.com/sony/sonyflake v1.2.0
)

require golang.org/x/sys v0.35.0 // indirect
