from graphbook import event, param, source, step


@step("GenerateNumbers")
@source()
@param("amount", type="number", default=1000)
def generate_numbers(ctx):
    """The wheel's sample source, with deterministic numbers instead of random ones."""
    amount = ctx.amount
    for i in range(amount):
        yield {
            "out": {
                "numbers": [(i * 7 + k * 3) % 11 for k in range(4)],
                "amount_type": type(amount).__name__,
            }
        }


@step("CalcMean")
def calc_mean(ctx, data):
    numbers = data["numbers"]
    mean = sum(numbers) / len(numbers)
    data["mean"] = mean


@step("Transform")
@param("scale", type="number", default=1)
@param("shift", type="number", default=0)
def transform(ctx, data):
    scale = ctx.scale
    shift = ctx.shift
    data["numbers"] = [num * scale + shift for num in data["numbers"]]
    data["param_types"] = [type(scale).__name__, type(shift).__name__]


def calc_running_mean_init(ctx):
    ctx.running_mean = 0
    ctx.count = 0


def report_running_mean(ctx):
    ctx.log(ctx.running_mean)


@step("CalcRunningMean")
@event("__init__", calc_running_mean_init)
@event("on_end", report_running_mean)
def calc_running_mean(ctx, data):
    mean = data["mean"]
    ctx.running_mean = (ctx.running_mean * ctx.count + mean) / (ctx.count + 1)
    ctx.count += 1
