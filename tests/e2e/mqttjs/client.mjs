// One MQTT.js client, driven by JSON lines on stdin; what happens comes out as JSON lines on stdout.
//
//   node client.mjs URL '{"protocolVersion": 5, "username": ..., "properties": {...}}'
//
// stdin, one command a line (payloads in base64, so that any bytes go through):
//   {"op": "subscribe", "id": 1, "filter": "a/#", "qos": 2}
//   {"op": "publish", "id": 2, "topic": "a/b", "payload": "aGk=", "qos": 1, "retain": true}
//   {"op": "end"}                          (or stdin closing)
// stdout:
//   {"event": "connect", "reasonCode": 0, "properties": {...}}
//   {"event": "suback", "id": 1, "granted": [2], "error": null}
//   {"event": "puback", "id": 2, "error": null, "code": null}   (code: an MQTT 5 reason code >= 0x80)
//   {"event": "message", "topic": "a/b", "payload": "aGk=", "qos": 1, "retain": false, "alias": null}
//     (topic: resolved by MQTT.js when the PUBLISH came with a topic alias, which "alias" gives)
//   {"event": "error" | "disconnect" | "close" | "ended", ...}
import mqtt from "mqtt";
import { createInterface } from "node:readline";

const [url, optionsText] = process.argv.slice(2);
const out = (event) => process.stdout.write(JSON.stringify(event) + "\n");
const client = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: 15000, ...JSON.parse(optionsText ?? "{}") });

client.on("connect", (connack) =>
  out({ event: "connect", reasonCode: connack.reasonCode ?? connack.returnCode ?? 0, properties: connack.properties ?? {} }));
client.on("message", (topic, payload, packet) =>
  out({ event: "message", topic, payload: payload.toString("base64"), qos: packet.qos, retain: packet.retain,
         alias: packet.properties?.topicAlias ?? null }));
client.on("error", (err) => out({ event: "error", message: err.message, code: err.code ?? null }));
client.on("disconnect", (packet) => out({ event: "disconnect", reasonCode: packet.reasonCode ?? null }));
client.on("close", () => out({ event: "close" }));

let ending = false;
function end() {
  if (ending) return;
  ending = true;
  client.end(false, () => {
    out({ event: "ended" });
    process.exit(0);
  });
}

const commands = {
  subscribe: (c) =>
    client.subscribe(c.filter, { qos: c.qos }, (err, granted) =>
      out({ event: "suback", id: c.id, granted: (granted ?? []).map((g) => g.qos), error: err ? err.message : null })),
  publish: (c) =>
    client.publish(c.topic, Buffer.from(c.payload, "base64"), { qos: c.qos, retain: c.retain }, (err) =>
      out({ event: "puback", id: c.id, error: err ? err.message : null, code: err?.code ?? null })),
  unsubscribe: (c) =>
    client.unsubscribe(c.filter, (err) => out({ event: "unsuback", id: c.id, error: err ? err.message : null })),
  end,
};

createInterface({ input: process.stdin })
  .on("line", (line) => {
    if (!line.trim()) return;
    const command = JSON.parse(line);
    const run = commands[command.op];
    if (run === undefined) out({ event: "error", message: `unknown op ${command.op}`, code: null });
    else run(command);
  })
  .on("close", end);
