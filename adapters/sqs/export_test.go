package sqsonce

// SQSTimeout is the bound of each SQS call that settles a message.
const SQSTimeout = sqsTimeout
