from graphbook import batch, param, source, step


@step("Items")
@source()
@param("count", type="number", default=3)
def items(ctx):
    for i in range(ctx.count):
        yield {"out": {"i": i, "items": list(range(i + 1))}}


def load_item(ctx, item):
    return item * 10


@step("SumBatch")
@batch(batch_size=2, item_key="items", load_fn=load_item)
def sum_batch(ctx, outputs, items, datas):
    for out, _item, data in zip(outputs, items, datas):
        data.setdefault("loaded", []).append(out)
