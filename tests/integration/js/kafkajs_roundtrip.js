// Drives KafkaJS against a broker and prints one JSON object with what it saw.
// Usage: node kafkajs_roundtrip.js BOOTSTRAP TOPIC COUNT BASE_TS
// Produces COUNT keyed messages (timestamps BASE_TS + i*1000, one header each), consumes them back
// in a consumer group, and asks fetchTopicOffsetsByTimestamp for BASE_TS + (COUNT/2)*1000.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, countArg, baseArg] = process.argv.slice(2);
  const count = Number(countArg);
  const base = Number(baseArg);
  const kafka = new Kafka({ clientId: "chronolog-kafkajs", brokers: [bootstrap], logLevel: logLevel.ERROR,
                            retry: { retries: 5 } });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const messages = [];
  for (let i = 0; i < count; i++) {
    messages.push({ key: `k${i}`, value: `value-${i}`, timestamp: String(base + i * 1000),
                    headers: { seq: String(i) } });
  }
  const produced = await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: `g-${topic}`, sessionTimeout: 10000,
                                    heartbeatInterval: 1000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const consumed = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`consumed ${consumed.length} of ${count}`)), 60000);
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        consumed.push({ partition, offset: Number(message.offset), key: message.key.toString(),
                        value: message.value.toString(), timestamp: Number(message.timestamp),
                        headers: Object.fromEntries(Object.entries(message.headers || {})
                          .map(([k, v]) => [k, v.toString()])) });
        if (consumed.length >= count) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();

  const admin = kafka.admin();
  await admin.connect();
  const byTime = await admin.fetchTopicOffsetsByTimestamp(topic, base + Math.floor(count / 2) * 1000);
  await admin.disconnect();
  process.stdout.write(JSON.stringify({ produced, consumed, byTime }) + "\n");
}

main().catch((err) => { process.stderr.write(`kafkajs failed: ${err.stack || err}\n`); process.exit(1); });
