// RocketMQ's official Node.js client (rocketmq-client-nodejs, unchanged): a Producer sends COUNT
// messages, a SimpleConsumer receives and acks them; one JSON line says what came back.
//   node node_client.js ENDPOINT TOPIC GROUP COUNT
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const [endpoint, topic, group, countText] = process.argv.slice(2);
  const count = Number(countText);
  const producer = new Producer({ endpoints: endpoint });
  await producer.startup();
  const ids = [];
  for (let i = 0; i < count; i++) {
    const receipt = await producer.send({ topic, tag: 'node', keys: [`k${i}`], body: Buffer.from(`node-${i}`) });
    ids.push(receipt.messageId);
  }
  await producer.shutdown();
  const consumer = new SimpleConsumer({ consumerGroup: group, endpoints: endpoint,
    subscriptions: new Map().set(topic, '*'), awaitDuration: 5000 });
  await consumer.startup();
  const bodies = [];
  const deadline = Date.now() + 60000;
  while (bodies.length < count && Date.now() < deadline) {
    for (const message of await consumer.receive(16, 30000)) {
      bodies.push(message.body.toString());
      await consumer.ack(message);
    }
  }
  await consumer.shutdown();
  console.log(JSON.stringify({ sent: ids.length, ids, received: bodies.length, bodies: bodies.sort() }));
  process.exit(0);
}

main().catch((err) => { console.error(err); process.exit(1); });
