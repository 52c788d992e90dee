"""MultiWorkerMirroredStrategy on CPU: every worker runs this script and exits.

The launcher starts N processes, each with TF_CONFIG = {"cluster": {"worker": [...]},
"task": {"type": "worker", "index": i}}. Each trains the same tiny Keras model on its
own shard of synthetic data; gradients are all-reduced over gRPC.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no C++ info/warning lines
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # no oneDNN banner; reproducible float sums

import numpy as np
import tensorflow as tf

STEPS = 10

strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG; blocks until all join
resolver = strategy.cluster_resolver
rank, size = resolver.task_id, strategy.num_replicas_in_sync
tf.keras.utils.set_random_seed(0)  # same initial weights on every worker

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 16)).astype(np.float32)
y = x @ rng.normal(size=(16, 1)).astype(np.float32)
global_batch = 32 * size
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=0).repeat()
           .batch(global_batch).with_options(options))  # each worker gets 1/size of a batch

# Keras 3's model.fit() fails under MultiWorkerMirroredStrategy ("Attempt to convert a value
# (PerReplica...) with an unsupported type ... to a Tensor"), so this is a custom loop.
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    model.build((None, 16))
    optimizer.build(model.trainable_variables)


@tf.function
def train_step(features, labels):
    def step(features, labels):
        with tf.GradientTape() as tape:
            per_example = tf.square(model(features, training=True) - labels)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        # apply_gradients sums the gradients over all workers (collective all-reduce)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss
    losses = strategy.run(step, args=(features, labels))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


batches = iter(strategy.experimental_distribute_dataset(dataset))
for step in range(STEPS):
    loss = train_step(*next(batches))
    print(f"worker {rank}/{size} step {step} loss {float(loss):.6f}", flush=True)

# The replicas must hold identical weights: compare each with the mean over all workers.
@tf.function
def mean_over_workers(t):
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(tf.identity, (t,)), axis=None)


weights = tf.concat([tf.reshape(v, [-1]) for v in model.trainable_variables], 0)
mean = mean_over_workers(weights)
if not np.allclose(weights.numpy(), mean.numpy(), rtol=0, atol=1e-6):
    raise SystemExit(f"worker {rank}: replicas diverged")
if rank == 0:
    print("tensorflow multi-worker ok", flush=True)
