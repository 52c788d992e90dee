"""ParameterServerStrategy on CPU: one chief (coordinator), workers and parameter servers.

Every task runs this script with TF_CONFIG naming the cluster and its own task, plus
--task_name=<chief|worker|ps> --task_index=<i>. Worker and ps tasks serve forever (the
launcher stops them); the chief trains a tiny Keras model and exits 0.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no C++ info/warning lines
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # no oneDNN banner; reproducible float sums

import numpy as np
import tensorflow as tf

STEPS = 10

parser = argparse.ArgumentParser()
parser.add_argument("--task_name")
parser.add_argument("--task_index", type=int)
args, _ = parser.parse_known_args()

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
for arg, want in ((args.task_name, resolver.task_type), (args.task_index, resolver.task_id)):
    if arg is not None and arg != want:  # TF_CONFIG decides; the arguments must agree with it
        raise SystemExit(f"--task_name={args.task_name} --task_index={args.task_index} disagree "
                         f"with TF_CONFIG task {resolver.task_type}:{resolver.task_id}")

if resolver.task_type in ("worker", "ps"):
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc",
                                  start=True)
    print(f"{resolver.task_type} {resolver.task_id} serving", flush=True)
    server.join()

# Keras 3's model.fit() cannot drive a ParameterServerStrategy (it asks for
# ClusterCoordinator.create_per_worker_dataset), so the chief runs a coordinator loop.
tf.keras.utils.set_random_seed(0)
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    model.build((None, 16))
    optimizer.build(model.trainable_variables)

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 16)).astype(np.float32)
y = x @ rng.normal(size=(16, 1)).astype(np.float32)


def dataset_fn():
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=0).repeat().batch(32)


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))


@tf.function
def train_step(iterator):
    def step(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features, training=True) - labels))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss
    return strategy.run(step, args=next(iterator))


for step in range(STEPS):
    loss = coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()  # one step at a time keeps the log ordered; drop it to pipeline steps
    print(f"chief step {step} loss {loss.fetch():.6f}", flush=True)
print("tensorflow ps ok", flush=True)
