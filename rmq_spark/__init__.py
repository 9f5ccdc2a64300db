"""rmq_spark: the client SDK and the PySpark data source 'rocketmq-batch'."""
