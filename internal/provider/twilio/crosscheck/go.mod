module github.com/msgq/msgq/internal/provider/twilio/crosscheck

go 1.26.8

require (
	github.com/msgq/msgq v0.0.0
	github.com/twilio/twilio-go v1.31.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/golang/mock v1.6.0 // indirect
	github.com/nyaruka/phonenumbers v1.8.1 // indirect
	github.com/oklog/ulid/v2 v2.1.2 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/msgq/msgq => ../../../..
