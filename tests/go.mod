module github.com/jobonce/jobonce/tests

go 1.26.0

replace (
	github.com/jobonce/jobonce => ../
	github.com/jobonce/jobonce/adapters/lambda => ../adapters/lambda
	github.com/jobonce/jobonce/adapters/sqs => ../adapters/sqs
	github.com/jobonce/jobonce/core/dynamostore => ../core/dynamostore
)

require (
	github.com/aws/aws-lambda-go v1.55.1
	github.com/aws/aws-sdk-go-v2 v1.48.0
	github.com/aws/aws-sdk-go-v2/service/dynamodb v1.74.1
	github.com/aws/aws-sdk-go-v2/service/sqs v1.53.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/jobonce/jobonce v0.0.0
	github.com/jobonce/jobonce/adapters/lambda v0.0.0-00010101000000-000000000000
	github.com/jobonce/jobonce/core/dynamostore v0.0.0-00010101000000-000000000000
	github.com/jobonce/jobonce/core/pgstore v0.0.0-00010101000000-000000000000
	github.com/jobonce/jobonce/internal/pgtest v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.5.12 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.8.12 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/accept-encoding v1.13.25 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/endpoint-discovery v1.13.12 // indirect
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jobonce/jobonce/adapters/sqs v0.0.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/jobonce/jobonce/core/pgstore => ../core/pgstore

replace github.com/jobonce/jobonce/internal/pgtest => ../internal/pgtest
