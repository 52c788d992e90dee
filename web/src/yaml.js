// Job files as YAML text for the submit form, read and written with the `yaml` package: the
// same job as the JSON the API returns, in the order a person writes one.
import { Document, isScalar, parse, visit } from "yaml";

const ORDER = ["name", "framework", "workdir", "command", "hyperparameters", "env", "roles",
  "inputs", "outputs", "policy"];

export function toYaml(job) {
  const ordered = {};
  for (const k of ORDER) if (k in job) ordered[k] = job[k];
  for (const k of Object.keys(job)) if (!(k in ordered)) ordered[k] = job[k];
  // YAML 1.1 rules: strings such as "yes" and "on" are quoted, as every YAML reader wants.
  const doc = new Document(ordered, { version: "1.1" });
  // A short list of words (a command) reads best on one line.
  visit(doc, {
    Seq(_, node) {
      if (node.items.every(isScalar) && node.items.map((i) => String(i.value)).join(", ").length < 72) {
        node.flow = true;
      }
    },
  });
  return doc.toString({ flowCollectionPadding: false, lineWidth: 0 });
}

// The job in `text`, or throws an Error whose message says where YAML stopped making sense.
export function fromYaml(text) {
  const job = parse(text, { version: "1.1" });
  if (job === null || typeof job !== "object" || Array.isArray(job)) {
    throw new Error("a job file is a mapping of fields (name:, command:, roles:, ...)");
  }
  return job;
}

