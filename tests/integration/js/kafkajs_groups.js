// Drives KafkaJS's admin group APIs against a broker and prints one JSON object with the answers.
// Usage: node kafkajs_groups.js BOOTSTRAP FETCH_GROUP DELETE_GROUP BUSY_GROUP
// fetchOffsets of FETCH_GROUP without topics (OffsetFetch with a null topic list), listGroups,
// describeGroups, then deleteGroups of DELETE_GROUP (an empty group) and of BUSY_GROUP (one with a
// member: KafkaJS throws, and the error's groups are reported).
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, fetchGroup, deleteGroup, busyGroup] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "chronolog-kafkajs-admin", brokers: [bootstrap],
                            logLevel: logLevel.NOTHING, retry: { retries: 2 } });
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchOffsets({ groupId: fetchGroup });
  const listed = await admin.listGroups();
  const described = await admin.describeGroups([fetchGroup, busyGroup]);
  const deleted = await admin.deleteGroups([deleteGroup]);
  let busy;
  try {
    busy = { result: await admin.deleteGroups([busyGroup]) };
  } catch (err) {
    busy = { error: err.name, groups: (err.groups || []).map((g) => ({ groupId: g.groupId,
             errorCode: g.errorCode, error: g.error && g.error.type })) };
  }
  const afterDelete = await admin.fetchOffsets({ groupId: deleteGroup });
  await admin.disconnect();
  process.stdout.write(JSON.stringify({ offsets, listed, described, deleted, busy, afterDelete })
                       + "\n");
}

main().catch((err) => { process.stderr.write(`kafkajs failed: ${err.stack || err}\n`); process.exit(1); });
