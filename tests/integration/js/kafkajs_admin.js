// Drives KafkaJS's admin client against a broker and prints one JSON object with what it saw.
// Usage: node kafkajs_admin.js BOOTSTRAP TOPIC
// Creates TOPIC (2 partitions, retention.ms=3600000), describes its configs and the broker's,
// alters a config, grows it to 4 partitions, produces 5 messages to partition 3, deletes the
// records below offset 2 there and reads the partition offsets and metadata back.
const { Kafka, logLevel, ConfigResourceTypes } = require("kafkajs");

async function main() {
  const [bootstrap, topic] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "chronolog-kafkajs-admin", brokers: [bootstrap],
                            logLevel: logLevel.ERROR, retry: { retries: 3 } });
  const admin = kafka.admin();
  await admin.connect();
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions: 2, replicationFactor: 1,
               configEntries: [{ name: "retention.ms", value: "3600000" }] }],
    waitForLeaders: true,
  });
  const described = await admin.describeConfigs({
    includeSynonyms: true,
    resources: [
      { type: ConfigResourceTypes.TOPIC, name: topic, configNames: ["retention.ms", "segment.bytes"] },
      { type: ConfigResourceTypes.BROKER, name: "0", configNames: ["log.retention.hours"] },
    ],
  });
  await admin.alterConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
                  configEntries: [{ name: "cleanup.policy", value: "delete,compact" }] }],
  });
  const altered = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: [] }],
  });
  await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] });
  let tooFew = null;
  try {
    await admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] });
  } catch (err) {
    tooFew = err.type || err.name;
  }
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, acks: -1, messages: [0, 1, 2, 3, 4].map((i) => (
    { partition: 3, key: `k${i}`, value: `v${i}` })) });
  await producer.disconnect();
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 3, offset: "2" }] });
  const offsets = await admin.fetchTopicOffsets(topic);
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
  const cluster = await admin.describeCluster();
  await admin.disconnect();
  process.stdout.write(JSON.stringify({ created, described, altered, tooFew, offsets, metadata,
                                        cluster }) + "\n");
}

main().catch((err) => { process.stderr.write(`kafkajs admin failed: ${err.stack || err}\n`); process.exit(1); });
