"""Plain Kafka: topic creation, publish and tail I/O, the consumed-record type."""
