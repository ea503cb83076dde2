"""What tests in several folders share that is not a pytest fixture: local stand-ins for services (hosted model
endpoints, an S3-protocol server, a filled Hugging Face cache) and synthetic data."""
