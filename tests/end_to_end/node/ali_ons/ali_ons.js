// ali-ons against a RocketMQ name server: send N messages, consume them all with a push
// consumer, print one JSON line {"sent", "received", "bodies"}. Used by test_ali_ons.py.
'use strict';
const httpclient = require('urllib');
const { Producer, Consumer, Message } = require('ali-ons');

const [nameSrv, topic, group, count] = process.argv.slice(2);
const total = Number(count);
const common = { httpclient, nameSrv, accessKeyId: 'none', accessKeySecret: 'none', persistent: false };

async function main() {
  const producer = new Producer({ ...common, producerGroup: `${group}-producer` });
  await producer.ready();
  let sent = 0;
  for (let i = 0; i < total; i++) {
    const result = await producer.send(new Message(topic, 'TagA', `node-${i}`));
    if (result.sendStatus === 'SEND_OK') sent++;
  }
  await producer.close();
  const bodies = new Set();
  const consumer = new Consumer({ ...common, consumerGroup: group, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' });
  consumer.on('error', err => console.error(err.message));
  consumer.subscribe(topic, '*', async msg => { bodies.add(msg.body.toString()); });
  await consumer.ready();
  const deadline = Date.now() + 60000;
  while (bodies.size < total && Date.now() < deadline) await new Promise(r => setTimeout(r, 100));
  await consumer.close();
  console.log(JSON.stringify({ sent, received: bodies.size, bodies: [...bodies].sort() }));
  process.exit(0);
}

main().catch(err => { console.error(err); process.exit(1); });
